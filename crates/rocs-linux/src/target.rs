//! Processes and CPUs as /proc and /sys show them.

use std::io;

use crate::geometry::parse_cpu_list;

/// Whether the process is alive: it has a /proc entry and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may contain
        // anything: look after the last ')'.
        Ok(stat) => match stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
        {
            Some(state) => state != "Z" && state != "X",
            None => false,
        },
        Err(_) => false,
    }
}

/// The thread ids of a process. ESRCH-like `NotFound` when it does not exist.
pub fn threads(pid: u32) -> io::Result<Vec<u32>> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no process with pid {pid}"),
                )
            } else {
                e
            }
        })?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// CPUs that are online (perf events per CPU go on these).
pub fn online_cpus() -> Vec<usize> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse_cpu_list(&s))
        .map(|v| v.into_iter().map(|c| c as usize).collect())
        .unwrap_or_else(|| {
            (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_has_threads() {
        let me = std::process::id();
        assert!(process_alive(me));
        assert!(threads(me).unwrap().contains(&me));
        assert!(!process_alive(u32::MAX - 1));
        assert_eq!(
            threads(u32::MAX - 1).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert!(!online_cpus().is_empty());
    }
}
