//! NFSv3 and MOUNT over one TCP port, translated onto tarn-fs.
