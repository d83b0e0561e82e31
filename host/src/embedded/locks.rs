//! File locks (`flock`) in the data directory: the directory lock every
//! host holds shared for its life (`leasehold.lock`), and each live host's
//! liveness lock on its holder name (`hosts/<holder>.lock`), held
//! exclusively. The kernel drops a process's locks the moment it dies,
//! however it dies: that is the embedded backend's liveness session.
//!
//! A lock file is never removed while its lock may be taken: a claimer
//! that locked a file checks that its name still leads to the very file it
//! locked, and tries again otherwise.

use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use cap_std::fs::{File, MetadataExt, OpenOptions, OpenOptionsExt};

use super::dir::{DataDir, HOSTS_DIR};

/// `flock` with `LOCK_NB`: `Ok(true)` when taken, `Ok(false)` when another
/// open file holds a conflicting lock.
pub fn try_lock(file: &File, exclusive: bool) -> io::Result<bool> {
    let operation = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    } | libc::LOCK_NB;
    // SAFETY: the descriptor is owned by `file` for the whole call.
    let result = unsafe { libc::flock(file.as_raw_fd(), operation) };
    if result == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(error)
    }
}

/// Give up a lock taken with [`try_lock`] (closing the file does too).
pub fn unlock(file: &File) {
    // SAFETY: the descriptor is owned by `file`; unlocking cannot harm it.
    unsafe {
        libc::flock(file.as_raw_fd(), libc::LOCK_UN);
    }
}

/// The liveness lock file of `holder`, relative to the data directory. A
/// holder name is printable ASCII without spaces, up to 253 bytes, and
/// may hold `/` or start with `.`: such a name, or a long one, is stored
/// under its SHA-256 instead.
pub fn holder_lock_file(holder: &str) -> PathBuf {
    let plain = !holder.is_empty()
        && holder.len() <= 200
        && !holder.starts_with('.')
        && holder
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let name = if plain {
        format!("{holder}.lock")
    } else {
        let digest = ring::digest::digest(&ring::digest::SHA256, holder.as_bytes());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256-{hex}.lock")
    };
    PathBuf::from(HOSTS_DIR).join(name)
}

/// Whether a live process holds `holder`'s liveness lock now. A missing
/// lock file means nobody ever claimed the name here (or it was removed),
/// so nobody holds it.
pub fn holder_locked(data: &DataDir, holder: &str) -> io::Result<bool> {
    let mut options = OpenOptions::new();
    options.read(true);
    options.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    let file = match data.dir().open_with(holder_lock_file(holder), &options) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    // Shared: two standbys probing at once do not see each other as the
    // holder. A claimer that meets a probe tries again shortly.
    if try_lock(&file, false)? {
        unlock(&file);
        Ok(false)
    } else {
        Ok(true)
    }
}

/// A lock held for as long as the value lives.
#[derive(Debug)]
pub struct HeldLock {
    file: File,
    name: PathBuf,
}

impl HeldLock {
    /// Take the lock on `name` (created if absent) without waiting:
    /// `Ok(None)` when another open file holds it. Only a lock on the file
    /// the name leads to now is kept.
    pub fn take(data: &DataDir, name: PathBuf, exclusive: bool) -> io::Result<Option<Self>> {
        // A file removed (or replaced) between the open and the lock would
        // hold a lock nobody else finds: then again, on the new one. Each
        // attempt after the first means someone removed the file meanwhile,
        // so a few are plenty.
        for _ in 0..8 {
            let file = data.open_file(&name)?;
            if !try_lock(&file, exclusive)? {
                return Ok(None);
            }
            let held = Self {
                file,
                name: name.clone(),
            };
            if held.still_named(data)? {
                return Ok(Some(held));
            }
        }
        Err(io::Error::other(format!(
            "{} keeps being removed while it is locked",
            name.display()
        )))
    }

    /// Whether the lock's name still leads to the locked file.
    pub fn still_named(&self, data: &DataDir) -> io::Result<bool> {
        let held = self.file.metadata()?;
        match data.dir().symlink_metadata(&self.name) {
            Ok(named) => Ok((named.dev(), named.ino()) == (held.dev(), held.ino())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The lock file's name, relative to the data directory.
    pub fn name(&self) -> &std::path::Path {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_names_map_to_file_names_inside_the_hosts_folder() {
        assert_eq!(
            holder_lock_file("host-a"),
            PathBuf::from("hosts/host-a.lock")
        );
        assert_eq!(
            holder_lock_file("web-1.example"),
            PathBuf::from("hosts/web-1.example.lock")
        );
        for odd in ["../etc", "a/b", ".hidden", &"x".repeat(240)] {
            let name = holder_lock_file(odd);
            assert_eq!(name.parent(), Some(std::path::Path::new("hosts")), "{odd}");
            let file = name.file_name().unwrap().to_str().unwrap();
            assert!(file.starts_with("sha256-") && file.len() < 100, "{file}");
        }
        assert_ne!(holder_lock_file("a/b"), holder_lock_file("a/c"));
    }

    #[test]
    fn a_held_lock_is_seen_by_others_and_freed_when_dropped() {
        let base = super::super::scratch_dir("locks");
        let data = DataDir::open(&base).unwrap();
        data.ensure_dir(HOSTS_DIR).unwrap();
        assert!(!holder_locked(&data, "host-a").unwrap(), "never claimed");
        let held = HeldLock::take(&data, holder_lock_file("host-a"), true)
            .unwrap()
            .expect("free");
        assert!(holder_locked(&data, "host-a").unwrap());
        assert!(
            HeldLock::take(&data, holder_lock_file("host-a"), true)
                .unwrap()
                .is_none(),
            "a second claimer, even in this process, finds it taken"
        );
        assert!(held.still_named(&data).unwrap());
        drop(held);
        assert!(!holder_locked(&data, "host-a").unwrap());
        crate::embedded::remove_scratch(&base);
    }

    #[test]
    fn a_lock_whose_file_was_removed_is_not_still_named() {
        let base = super::super::scratch_dir("locks-removed");
        let data = DataDir::open(&base).unwrap();
        data.ensure_dir(HOSTS_DIR).unwrap();
        let held = HeldLock::take(&data, holder_lock_file("host-a"), true)
            .unwrap()
            .unwrap();
        std::fs::remove_file(base.join("hosts/host-a.lock")).unwrap();
        assert!(!held.still_named(&data).unwrap());
        crate::embedded::remove_scratch(&base);
    }
}
