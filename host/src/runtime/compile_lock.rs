//! One compile per machine: replicas that share a compile cache
//! (`[runtime] cache_dir`) compile a component one at a time, so the first
//! stores the artifact and the others read it from the cache instead of
//! compiling it again. Without this, replicas started or reloaded
//! together all miss the cache and each compiles (seconds to minutes for an
//! interpreter component).
//!
//! The lock is `flock` on one of [`COMPILE_LOCK_SHARDS`] files in the
//! cache folder, picked by the component's digest: two different
//! components rarely wait for each other, and the files stay few. It is an
//! optimization only: when it cannot be taken (a read-only folder, a lock
//! held past [`COMPILE_LOCK_WAIT`]) the compile goes ahead without it.

use std::fs::File;
use std::path::Path;
use std::time::Instant;

use crate::limits::COMPILE_LOCK_SHARDS;
use crate::timeouts::{COMPILE_LOCK_POLL, COMPILE_LOCK_WAIT};

/// The folder of the lock files, inside the cache folder.
pub const LOCK_DIR: &str = "leasehold-compile-locks";

/// A held compile lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct CompileLock {
    _file: File,
}

/// The lock file of the component `bytes` in `cache_dir`.
pub fn lock_file(cache_dir: &Path, bytes: &[u8]) -> std::path::PathBuf {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let shard = digest.as_ref()[0] as usize % COMPILE_LOCK_SHARDS;
    cache_dir.join(LOCK_DIR).join(format!("{shard:02}.lock"))
}

/// Take the compile lock of `bytes` in `cache_dir`, waiting while another
/// process (or engine) compiles a component of the same shard; `None`
/// when it cannot be had (the reason is logged), and the caller compiles
/// anyway.
pub fn hold(cache_dir: &Path, bytes: &[u8]) -> Option<CompileLock> {
    let path = lock_file(cache_dir, bytes);
    let opened = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
        });
    let file = match opened {
        Ok(file) => file,
        Err(e) => {
            tracing::warn!(lock = %path.display(), error = %e, "cannot open the compile lock; compiling without it");
            return None;
        }
    };
    let started = Instant::now();
    loop {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor this function owns; no memory is
        // shared with the kernel.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Some(CompileLock { _file: file });
        }
        let error = std::io::Error::last_os_error();
        if !matches!(
            error.raw_os_error(),
            Some(libc::EWOULDBLOCK) | Some(libc::EINTR)
        ) {
            tracing::warn!(lock = %path.display(), error = %error, "cannot take the compile lock; compiling without it");
            return None;
        }
        if started.elapsed() >= COMPILE_LOCK_WAIT {
            tracing::warn!(
                lock = %path.display(),
                waited_s = COMPILE_LOCK_WAIT.as_secs(),
                "another process has compiled with this lock for too long; compiling without it"
            );
            return None;
        }
        std::thread::sleep(COMPILE_LOCK_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_has_one_of_a_few_lock_files() {
        let dir = Path::new("/cache");
        let a = lock_file(dir, b"component a");
        assert_eq!(a, lock_file(dir, b"component a"));
        assert!(a.starts_with("/cache/leasehold-compile-locks"));
        let files: std::collections::BTreeSet<_> = (0..1000u32)
            .map(|i| lock_file(dir, &i.to_le_bytes()))
            .collect();
        assert_eq!(files.len(), COMPILE_LOCK_SHARDS);
    }

    #[test]
    fn the_lock_is_held_until_dropped_and_missing_folders_do_not_stop_a_compile() {
        let dir =
            std::env::temp_dir().join(format!("leasehold-compile-lock-{}", std::process::id()));
        let held = hold(&dir, b"x").expect("taken");
        let file = std::fs::File::open(lock_file(&dir, b"x")).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: as above.
        let busy = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(busy, -1, "held by the first");
        drop(held);
        // SAFETY: as above.
        let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(free, 0, "released on drop");
        let _ = std::fs::remove_dir_all(&dir);
        // A cache folder that cannot hold the lock: compile without it.
        assert!(hold(Path::new("/proc/leasehold-no-such-folder"), b"x").is_none());
    }
}
