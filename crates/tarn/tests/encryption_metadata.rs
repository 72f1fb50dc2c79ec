//! Issue 12, test 3 through the daemon, for encrypted *metadata*: on a
//! two-way mirror (so no copy can repair it), every copy of
//! - a dnode block of an encrypted dataset (the sealed inode attributes
//!   of the 32 objects it holds), and
//! - the name block (ZAP leaf) of a directory of that dataset
//!
//! is damaged. Then `stat` of the files whose dnodes were in the block,
//! and `readdir` of the directory and `stat` of the names in it, fail with
//! EIO (nothing else: no attributes, no names), while the directory
//! holding those files still lists every name; files of other dnode
//! blocks still read back what was written; `pool scrub -w` counts the
//! errors; `pool status -v` names the files by path while the key is
//! loaded, and as `dataset:<0x…>` (the objects) once it is not.
//!
//! The blocks are found as the checker finds them: the exported pool is
//! imported read-only in this process (the key loaded from its file), and
//! the dnode block's pointer and the directory's leaf pointer give the
//! device offsets of every copy.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use common::{path_str, wait_mounted, wait_unmounted, Harness};

/// Files written into the dataset's root: enough for more than one dnode
/// block (32 objects each) beyond the first.
const FILES: usize = 72;
/// Names in the directory whose name block is damaged.
const NAMES: usize = 6;

fn content(i: usize) -> Vec<u8> {
    format!("file {i}: ").into_bytes().repeat(100 + i)
}

/// The device offsets (on each side of the mirror: the same) of every copy
/// of the blocks the dataset's object `dir`'s name leaf and its dnode
/// block `victim_block` occupy, found through a read-only import.
fn locate(vdevs: &[std::path::PathBuf], key_loaded_by: &str, dir: u64, victim_block: u64) -> (Vec<u64>, Vec<u64>) {
    let devices: Vec<Arc<dyn tarn_dev::Device>> =
        vdevs.iter().map(|v| tarn_dev::FileDevice::open(v, None).unwrap() as Arc<dyn tarn_dev::Device>).collect();
    let opts = tarn_obj::ImportOptions { readonly: true, hostname: "test".into(), ..Default::default() };
    let obj = tarn_obj::ObjPool::import(devices, opts).expect("read-only import");
    let pool = tarn_ds::Pool::open(obj).expect("open the datasets");
    pool.load_key(key_loaded_by, None, None, false).expect("load the key from its file");
    let os = pool.objset(key_loaded_by).unwrap();
    let dnode_bp = os.dnode_block_ptr(victim_block).unwrap();
    assert!(!dnode_bp.is_hole());
    assert_ne!(dnode_bp.flags & tarn_block::crypt::FLAG_PARTLY_SEALED, 0, "a sealed dnode block");
    let mut dir_phys = None;
    os.for_each_object(&mut |id, phys| {
        if id.0 == dir {
            dir_phys = Some(phys.clone());
        }
    })
    .unwrap();
    let dir_phys = dir_phys.expect("the directory's dnode");
    // A small directory: one level, its header block (0) and one leaf (1).
    assert_eq!((dir_phys.nlevels, dir_phys.nblocks), (1, 2), "the directory's map is a header and one leaf");
    let leaf_bp = dir_phys.bps[1];
    assert!(leaf_bp.is_encrypted() && leaf_bp.level == 0, "the names are sealed");
    let offsets = |bp: &tarn_block::BlockPtr| bp.dvas().iter().map(|d| tarn_vdev::DATA_START + d.offset).collect::<Vec<u64>>();
    (offsets(&dnode_bp), offsets(&leaf_bp))
}

/// Overwrites bytes near the start of the block at `at` on every device.
fn damage(vdevs: &[std::path::PathBuf], at: &[u64]) {
    for v in vdevs {
        let f = common::open_rw(v);
        for &off in at {
            let mut page = vec![0u8; 4096];
            f.read_exact_at(&mut page, off).unwrap();
            for b in &mut page[64..1024] {
                *b = !*b;
            }
            f.write_all_at(&page, off).unwrap();
        }
        f.sync_all().unwrap();
    }
}

fn assert_eio<T: std::fmt::Debug>(r: std::io::Result<T>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}"),
        Ok(v) => panic!("{what} succeeded with {v:?}"),
    }
}

#[test]
fn tampered_dnode_and_name_blocks_fail_with_eio_and_status_names_them() {
    let h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 2, 128 << 20);
    let vdir = vdevs[0].parent().unwrap().to_path_buf();
    h.create_pool("tank", &["mirror".into(), path_str(&vdevs[0]), path_str(&vdevs[1])]);
    let key = h.dir.join("secret.key");
    fs::write(&key, [0x5cu8; 32]).unwrap();
    let loc = format!("keylocation=file://{}", path_str(&key));
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &loc, "-o", "atime=off", "tank/secret"]);
    let ds = h.mountpoint("tank").join("secret");
    wait_mounted(&ds);

    // The directory first (its dnode in the first block), then the files.
    let names_dir = ds.join("names");
    fs::create_dir(&names_dir).unwrap();
    for i in 0..NAMES {
        common::write_file(&names_dir.join(format!("name-{i}.txt")), &content(1000 + i));
    }
    for i in 0..FILES {
        common::write_file(&ds.join(format!("f{i:02}")), &content(i));
    }
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    let dir_ino = ino(&names_dir);
    let mut kept: BTreeSet<u64> = (0..NAMES).map(|i| ino(&names_dir.join(format!("name-{i}.txt"))) / 32).collect();
    kept.insert(dir_ino / 32);
    let file_inos: Vec<u64> = (0..FILES).map(|i| ino(&ds.join(format!("f{i:02}")))).collect();
    // The victim block: the one holding most of the files and no
    // directory and no name of `names`.
    let mut per_block: BTreeMap<u64, usize> = BTreeMap::new();
    for i in &file_inos {
        *per_block.entry(i / 32).or_default() += 1;
    }
    let (&victim_block, &count) = per_block.iter().filter(|(b, _)| !kept.contains(b)).max_by_key(|(_, n)| **n).expect("a block of files only");
    let victims: Vec<usize> = (0..FILES).filter(|&i| file_inos[i] / 32 == victim_block).collect();
    let bystanders: Vec<usize> = (0..FILES).filter(|&i| file_inos[i] / 32 != victim_block).collect();
    assert!(count >= 8 && bystanders.len() >= 8, "victims {victims:?}, bystanders {bystanders:?}");
    h.export("tank");

    let (dnode_at, leaf_at) = locate(&vdevs, "tank/secret", dir_ino, victim_block);
    damage(&vdevs, &dnode_at);
    damage(&vdevs, &leaf_at);

    h.tarn_ok(&["pool", "import", "-l", "-d", &path_str(&vdir), "tank"]);
    wait_mounted(&ds);
    let check = |when: &str| {
        // The files of the damaged dnode block: no attributes, no data.
        for &i in &victims {
            let p = ds.join(format!("f{i:02}"));
            assert_eio(fs::metadata(&p), &format!("{when}: stat {}", p.display()));
            assert_eio(fs::read(&p), &format!("{when}: read {}", p.display()));
        }
        // Their directory still lists every name with its inode number
        // (as `ls` on ZFS: only the damaged entries' `stat` fails).
        let listed: BTreeMap<String, u64> = fs::read_dir(&ds)
            .unwrap_or_else(|e| panic!("{when}: readdir of the dataset: {e}"))
            .map(|e| e.map(|e| (e.file_name().into_string().unwrap(), e.ino())))
            .collect::<std::io::Result<_>>()
            .unwrap_or_else(|e| panic!("{when}: readdir of the dataset: {e}"));
        for (i, ino) in file_inos.iter().enumerate() {
            assert_eq!(listed.get(&format!("f{i:02}")), Some(ino), "{when}: f{i:02} in the listing");
        }
        // The damaged directory: no listing, no name in it resolves; the
        // directory itself (its dnode is intact) still stats.
        assert!(fs::metadata(&names_dir).unwrap().is_dir());
        assert_eio(fs::read_dir(&names_dir).and_then(|d| d.collect::<std::io::Result<Vec<_>>>()), &format!("{when}: readdir names"));
        for i in 0..NAMES {
            assert_eio(fs::metadata(names_dir.join(format!("name-{i}.txt"))), &format!("{when}: stat names/name-{i}.txt"));
        }
        // Everything else reads back what was written.
        for &i in &bystanders {
            let p = ds.join(format!("f{i:02}"));
            assert_eq!(fs::metadata(&p).unwrap().len(), content(i).len() as u64, "{when}: size of {}", p.display());
            assert_eq!(fs::read(&p).unwrap(), content(i), "{when}: {}", p.display());
        }
    };
    check("before the scrub");

    h.tarn_ok(&["pool", "scrub", "-w", "tank"]);
    let status = h.pool_json("tank");
    assert!(status["scan_stats"]["errors"].as_u64().unwrap_or(0) >= 2, "the dnode block and the leaf counted:\n{status:#}");
    let text = h.tarn_ok(&["pool", "status", "-v", "tank"]);
    assert!(text.contains(&format!("{}\n", path_str(&names_dir))), "the damaged directory named by its path:\n{text}");
    for &i in &victims {
        assert!(text.contains(&path_str(&ds.join(format!("f{i:02}")))), "victim f{i:02} not named:\n{text}");
    }
    for &i in &bystanders {
        assert!(!text.contains(&format!("f{i:02}\n")), "bystander f{i:02} named:\n{text}");
    }
    check("after the scrub");

    // Without the key: named by their objects, nothing of a name shown.
    h.tarn_ok(&["unload-key", "tank/secret"]);
    wait_unmounted(&ds);
    let text = h.tarn_ok(&["pool", "status", "-v", "tank"]);
    let first = victim_block * 32;
    for want in [format!("tank/secret:<0x{dir_ino:x}>"), format!("tank/secret:<0x{first:x}-0x{:x}>", first + 31)] {
        assert!(text.contains(&want), "{want} missing:\n{text}");
    }
    assert!(!text.contains("names") && !text.contains("/f"), "a name shown without the key:\n{text}");
}
