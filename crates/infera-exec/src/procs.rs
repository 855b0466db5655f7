//! The processes of this pid namespace by parent, read from `/proc/PID/stat` (the kernel
//! here may lack `/proc/PID/task/TID/children`).

/// Every process's parent: (pid, ppid).
fn parents() -> Vec<(i32, i32)> {
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let path = format!("/proc/{pid}/stat");
            let stat =
                infera_core::rootfs::read_system(std::path::Path::new(&path), infera_core::rootfs::SYSTEM_FILE_LIMIT)
                    .ok()?;
            // The fourth field, after the command name in parentheses (which may hold anything).
            let (_, rest) = stat.rsplit_once(')')?;
            Some((pid, rest.split_whitespace().nth(1)?.parse().ok()?))
        })
        .collect()
}

/// The processes whose parent is `parent`.
pub(crate) fn children_of(parent: i32) -> Vec<i32> {
    parents().into_iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| p).collect()
}

/// `root` and every process below it, leaving out `skip` (and what is below it).
pub(crate) fn descendants(root: i32, skip: i32) -> Vec<i32> {
    let all = parents();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        let below: Vec<i32> =
            all.iter().filter(|(c, pp)| *pp == p && *c != skip && !out.contains(c)).map(|(c, _)| *c).collect();
        out.extend(below);
        i += 1;
    }
    out
}
