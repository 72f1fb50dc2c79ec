//! `primarycache` (issue 11): which blocks of an object set the ARC keeps.
//! Three object sets, all / metadata / none, each with a file-like object
//! and a map: after a txg writes them and after they are read, the file's
//! data blocks are cached only under `all`, the map's block under `all`
//! and `metadata`, nothing under `none` — and every read returns the data.

mod common;
use common::*;
use tarn_obj::zap::Zap;
use tarn_obj::*;

fn objset_with(pool: &std::sync::Arc<ObjPool>, cache: CachePolicy) -> (ObjectSet, ObjectId, ObjectId, Vec<u8>) {
    let id = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    let os = pool.open_objset(id).unwrap();
    os.set_write_props(WriteProps { compression: Compression::Off, checksum: ChecksumKind::Fletcher4, copies: 1, primarycache: cache, secondarycache: Default::default() });
    let data: Vec<u8> = (0..(8usize << 17)).map(|i| (i * 7 + cache as usize) as u8).collect();
    let (file, map) = {
        let tx = pool.begin();
        let file = os.create(&tx, ObjType(18), 128 << 10, &[0; BONUS_LEN]).unwrap();
        os.write_data(&tx, file, 0, &data).unwrap();
        let map = Zap::create(&os, &tx, ObjType(17)).unwrap();
        for i in 0..50u32 {
            Zap::insert(&os, &tx, map, format!("entry{i}").as_bytes(), &i.to_le_bytes()).unwrap();
        }
        (file, map)
    };
    (os, file, map, data)
}

#[test]
fn primarycache_all_metadata_none() {
    let devs: Vec<std::sync::Arc<dyn Device>> = mem_devs(1, 256 << 20).into_iter().map(|d| d as std::sync::Arc<dyn Device>).collect();
    let pool = create(&devs, TopKind::Disk);
    let sets: Vec<_> = [CachePolicy::All, CachePolicy::Metadata, CachePolicy::None].into_iter().map(|c| (c, objset_with(&pool, c))).collect();
    pool.sync().unwrap();
    for pass in ["after the txg wrote them", "after reading them"] {
        for (cache, (os, file, map, data)) in &sets {
            if pass == "after reading them" {
                assert_eq!(read_all(os, *file, data.len()), *data, "{cache:?}: file data");
                assert_eq!(Zap::lookup(os, *map, b"entry7").unwrap(), Some(7u32.to_le_bytes().to_vec()), "{cache:?}: map entry");
            }
            let file_cached = (0..8).filter(|&b| os.is_block_cached(*file, b).unwrap()).count();
            let map_cached = os.is_block_cached(*map, 1).unwrap();
            let (want_file, want_map) = match cache {
                CachePolicy::All => (8, true),
                CachePolicy::Metadata => (0, true),
                CachePolicy::None => (0, false),
            };
            assert_eq!((file_cached, map_cached), (want_file, want_map), "{cache:?} {pass}: file blocks cached, map block cached");
        }
    }
}
