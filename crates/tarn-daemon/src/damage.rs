//! `pool status -v`'s list of damaged files: what a scrub found no good
//! copy of, named as zpool names it.

use std::collections::{BTreeMap, BTreeSet};

use tarn_obj::scan::ScanStats;

use crate::daemon::Imported;

/// Directory entries a `status -v` walk visits at most, looking for the
/// paths of objects whose own inodes do not read.
const DAMAGE_WALK_LIMIT: u64 = 1_000_000;

/// Names the files that hold unrecoverable blocks: the path through the
/// mounted dataset when the object is a reachable file, else the
/// `<dataset>:<0xobject>` form zpool prints. A damaged dnode block loses
/// the objects it holds: with the dataset mounted (its key loaded) the
/// files among them that a directory names are found by a walk of the
/// directories (their own inodes do not read) and named by path; when
/// the walk finds none (or the dataset is not mounted), the block is
/// named by its objects' range, `<dataset>:<0xfirst-0xlast>`. The walk
/// runs only when there is such damage, and stops after
/// `DAMAGE_WALK_LIMIT` entries.
pub(crate) fn describe_damage(imported: &Imported, st: &ScanStats) -> Vec<String> {
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    for ds in imported.ds.list() {
        if let Ok(os) = imported.ds.objset(&ds) {
            names.insert(os.id().0, ds);
        }
    }
    // Paths through the mounts: by parent pointers where the object's
    // inode reads, else (and for dnode blocks) by one walk per dataset.
    let mut paths: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut unnamed: BTreeMap<&str, (u64, BTreeSet<u64>)> = BTreeMap::new();
    for d in st.damaged.iter().filter(|d| d.object != tarn_obj::scan::META_OBJECT) {
        let Some(ds) = names.get(&d.objset) else { continue };
        let Some(m) = imported.mounts.get(ds) else { continue };
        let wanted = &mut unnamed.entry(ds).or_insert_with(|| (d.objset, Default::default())).1;
        if d.dnode_block {
            wanted.extend(d.object..d.object + tarn_obj::format::DNODES_PER_BLOCK);
        } else if let Some(path) = m.path_of(d.object) {
            paths.insert((d.objset, d.object), path);
        } else {
            wanted.insert(d.object);
        }
    }
    for (ds, (objset, inos)) in unnamed.into_iter().filter(|(_, (_, inos))| !inos.is_empty()) {
        if let Some(m) = imported.mounts.get(ds) {
            paths.extend(m.paths_by_walk(&inos, DAMAGE_WALK_LIMIT).into_iter().map(|(ino, path)| ((objset, ino), path)));
        }
    }
    let mut out = Vec::new();
    for d in &st.damaged {
        let lines = match names.get(&d.objset) {
            _ if d.objset == tarn_obj::scan::POOL_META => vec!["<pool metadata>".to_string()],
            None if d.objset == 0 => vec![format!("<metadata>:<0x{:x}>", d.object)],
            None => vec![format!("<0x{:x}>:<0x{:x}>", d.objset, d.object)],
            Some(ds) if d.object == tarn_obj::scan::META_OBJECT => vec![format!("{ds}:<metadata>")],
            Some(ds) if d.dnode_block => {
                let last = d.object + tarn_obj::format::DNODES_PER_BLOCK - 1;
                let found: Vec<String> = paths.range((d.objset, d.object)..=(d.objset, last)).map(|(_, p)| p.clone()).collect();
                if found.is_empty() {
                    vec![format!("{ds}:<0x{:x}-0x{last:x}>", d.object)]
                } else {
                    found
                }
            }
            Some(ds) => vec![paths.get(&(d.objset, d.object)).cloned().unwrap_or_else(|| format!("{ds}:<0x{:x}>", d.object))],
        };
        for line in lines {
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}
