//! The data directory as a capability: opened once by path (the only
//! ambient access the embedded backend makes), then every file under it is
//! reached through that handle ([`cap_std::fs::Dir`]), so no name inside it
//! (a symbolic link, `..`) can lead out of it.
//!
//! Opening checks what SQLite's locking needs and refuses the rest, each
//! with its reason ([`DirError`]):
//!
//! - a local filesystem: NFS, SMB/CIFS, FUSE and the other network or
//!   user-space filesystems ([`REFUSED_FILESYSTEMS`], by `statfs` magic)
//!   lose or fake the POSIX and `flock` locks SQLite's transactions and
//!   the hosts' liveness locks rest on, so two hosts could both write;
//! - writable by this process (a probe file is created and removed, and a
//!   read-only mount is named as such);
//! - owned by this user, and not in use by another user's process: files
//!   one user's host creates are that user's (mode 0600), so a second
//!   user's host would fail on them later, mid-way; it is refused at start
//!   instead, naming the process.
//!
//! SQLite opens its three files (`leasehold.db`, `-wal`, `-shm`) by name:
//! it has no way to be handed a directory. So before it does, the host
//! checks through the handle that none of them is a symbolic link, that
//! the directory's canonical path names the very directory the handle
//! holds, and opens the database with `SQLITE_OPEN_NOFOLLOW`, which makes
//! SQLite refuse a symbolic link anywhere in the name.
//!
//! Must never: open a file of the data directory by path other than
//! through [`DataDir::dir`] (SQLite's three files excepted, as above).

use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, MetadataExt, OpenOptions, OpenOptionsExt};
use thiserror::Error;

/// The database file inside the data directory.
pub const DATABASE_FILE: &str = "leasehold.db";
/// The files SQLite keeps beside it.
pub const DATABASE_FILES: [&str; 3] = ["leasehold.db", "leasehold.db-wal", "leasehold.db-shm"];
/// The folder of the hosts' liveness locks (`hosts/<holder>.lock`).
pub const HOSTS_DIR: &str = "hosts";
/// Held shared by every host on the directory for its whole life, and
/// exclusively by `leasehold import`, which must be alone.
pub const DIR_LOCK_FILE: &str = "leasehold.lock";

/// Filesystems the embedded backend refuses, by `statfs` magic: where
/// SQLite's locks (and `flock`) are not kept by the kernel of this machine
/// alone, or not at all.
pub const REFUSED_FILESYSTEMS: &[(i64, &str)] = &[
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x6573_5546, "FUSE"),
    (0x0102_1997, "9P"),
    (0x00C3_6400, "Ceph"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "AFS (kAFS)"),
    (0x0BD0_0BD0, "Lustre"),
    (0x0116_1970, "GFS2"),
    (0x7461_636F, "OCFS2"),
    (0x7363_6673, "CephFS (fuse)"),
    (0x0047_5542, "GlusterFS"),
];

/// The name of a refused filesystem, if `magic` (`statfs`'s `f_type`) is
/// one.
pub fn refused_filesystem(magic: i64) -> Option<&'static str> {
    REFUSED_FILESYSTEMS
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

/// Why a data directory cannot be used.
#[derive(Debug, Error)]
pub enum DirError {
    /// It is on a filesystem whose locks SQLite cannot trust.
    #[error(
        "data directory {path} is on {filesystem} (filesystem magic {magic:#x}): the embedded \
         backend needs a local filesystem, because SQLite's locks and the hosts' liveness locks \
         are not reliable on network or user-space filesystems and two hosts could both write; \
         choose a data_dir on a local disk, or use PostgreSQL ([database] url) for more than \
         one machine"
    )]
    Filesystem {
        /// The directory.
        path: PathBuf,
        /// The filesystem's name.
        filesystem: &'static str,
        /// Its `statfs` magic.
        magic: i64,
    },
    /// This process cannot write in it.
    #[error(
        "data directory {path} is not writable by this process ({reason}); make it writable, \
         or choose another data_dir"
    )]
    NotWritable {
        /// The directory.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// Another user owns it.
    #[error(
        "data directory {path} belongs to user {owner}, not to this process's user {user}: \
         another user's hosts use it, and what each user's host creates there only that user \
         can write; run as user {owner}, or choose another data_dir"
    )]
    OtherUser {
        /// The directory.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// This process's effective uid.
        user: u32,
    },
    /// A process of another user holds a lock in it.
    #[error(
        "data directory {path} is in use by process {pid} of user {owner} (it holds a lock on \
         {file}), not this process's user {user}; run as user {owner}, or choose another \
         data_dir"
    )]
    HeldByOtherUser {
        /// The directory.
        path: PathBuf,
        /// The other process.
        pid: u32,
        /// Its uid.
        owner: u32,
        /// This process's effective uid.
        user: u32,
        /// The file it holds a lock on.
        file: String,
    },
    /// A file SQLite opens by name is a symbolic link (or not a file).
    #[error(
        "data directory {path}: {file} is not a regular file (a symbolic link or another \
         kind); the embedded backend opens only its own files there; remove it"
    )]
    NotAFile {
        /// The directory.
        path: PathBuf,
        /// Which file.
        file: String,
    },
    /// It is not a directory, or it could not be opened or created.
    #[error("data directory {path}: {reason}")]
    Unusable {
        /// The directory.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// An open data directory.
#[derive(Debug)]
pub struct DataDir {
    dir: Dir,
    path: PathBuf,
}

impl DataDir {
    /// Open `path`, creating it (mode 0700) if it does not exist, and
    /// check it ([`DirError`]). The handle is the only ambient access: the
    /// rest goes through [`DataDir::dir`].
    pub fn open(path: &Path) -> Result<Self, DirError> {
        let unusable = |reason: String| DirError::Unusable {
            path: path.to_path_buf(),
            reason,
        };
        if !path.exists() {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(|e| match e.kind() {
                    io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
                        DirError::NotWritable {
                            path: path.to_path_buf(),
                            reason: format!("it does not exist and cannot be created: {e}"),
                        }
                    }
                    _ => unusable(format!("cannot be created: {e}")),
                })?;
        }
        let canonical = std::fs::canonicalize(path).map_err(|e| unusable(e.to_string()))?;
        let dir = Dir::open_ambient_dir(&canonical, cap_std::ambient_authority())
            .map_err(|e| unusable(format!("cannot be opened as a directory: {e}")))?;
        let opened = Self {
            dir,
            path: canonical,
        };
        opened.check_filesystem()?;
        opened.check_owner()?;
        opened.check_other_users()?;
        opened.check_writable()?;
        opened.check_files()?;
        Ok(opened)
    }

    /// What `leasehold check` says of `path` without creating or changing
    /// anything: the note for a directory that would be used as it is, or
    /// that would be created in a parent that passes; the refusal
    /// otherwise.
    pub fn check(path: &Path) -> Result<String, DirError> {
        if path.exists() {
            let canonical = std::fs::canonicalize(path).map_err(|e| DirError::Unusable {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
            let dir =
                Dir::open_ambient_dir(&canonical, cap_std::ambient_authority()).map_err(|e| {
                    DirError::Unusable {
                        path: canonical.clone(),
                        reason: format!("cannot be opened as a directory: {e}"),
                    }
                })?;
            let opened = Self {
                dir,
                path: canonical,
            };
            opened.check_filesystem()?;
            opened.check_owner()?;
            opened.check_other_users()?;
            opened.check_writable()?;
            opened.check_files()?;
            return Ok(format!(
                "data directory {}: local filesystem, writable",
                opened.path.display()
            ));
        }
        // The nearest existing ancestor is where it would be created.
        let mut parent = path.parent();
        while let Some(p) = parent {
            if p.as_os_str().is_empty() {
                parent = Some(Path::new("."));
                break;
            }
            if p.exists() {
                break;
            }
            parent = p.parent();
        }
        let parent = parent.unwrap_or(Path::new("/"));
        let dir = Dir::open_ambient_dir(parent, cap_std::ambient_authority()).map_err(|e| {
            DirError::NotWritable {
                path: path.to_path_buf(),
                reason: format!(
                    "it does not exist, and {} cannot be opened to create it: {e}",
                    parent.display()
                ),
            }
        })?;
        let probe = Self {
            dir,
            path: parent.to_path_buf(),
        };
        probe.check_filesystem().map_err(|e| match e {
            DirError::Filesystem {
                filesystem, magic, ..
            } => DirError::Filesystem {
                path: path.to_path_buf(),
                filesystem,
                magic,
            },
            other => other,
        })?;
        probe.check_writable().map_err(|e| match e {
            DirError::NotWritable { reason, .. } => DirError::NotWritable {
                path: path.to_path_buf(),
                reason: format!(
                    "it does not exist, and cannot be created in {}: {reason}",
                    parent.display()
                ),
            },
            other => other,
        })?;
        Ok(format!(
            "data directory {}: does not exist yet; will be created in {} (local filesystem, \
             writable)",
            path.display(),
            parent.display()
        ))
    }

    /// The handle every file under the directory is reached through.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The directory's canonical path, for messages and for SQLite.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path SQLite opens the database by, once [`DataDir::open`]
    /// checked it and the directory's canonical path still names the
    /// directory the handle holds.
    pub fn database_path(&self) -> Result<PathBuf, DirError> {
        let held = self
            .dir
            .dir_metadata()
            .map_err(|e| self.unusable(e.to_string()))?;
        let named = std::fs::metadata(&self.path).map_err(|e| self.unusable(e.to_string()))?;
        use std::os::unix::fs::MetadataExt as _;
        if (held.dev(), held.ino()) != (named.dev(), named.ino()) {
            return Err(self.unusable(
                "its path no longer names the directory this host opened (moved or replaced \
                 while it started)"
                    .to_string(),
            ));
        }
        self.check_files()?;
        Ok(self.path.join(DATABASE_FILE))
    }

    /// Open (creating, mode 0600) the file `name` under the directory for
    /// reading and writing, never following a symbolic link.
    pub fn open_file(&self, name: &Path) -> io::Result<cap_std::fs::File> {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true);
        options.mode(0o600);
        options.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        self.dir.open_with(name, &options)
    }

    /// Create the folder `name` under the directory (mode 0700) if absent.
    pub fn ensure_dir(&self, name: &str) -> io::Result<()> {
        let mut builder = DirBuilder::new();
        builder.mode(0o700);
        match self.dir.create_dir_with(name, &builder) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if self.dir.symlink_metadata(name)?.is_dir() {
                    Ok(())
                } else {
                    Err(io::Error::other(format!(
                        "{name} exists and is not a folder"
                    )))
                }
            }
            Err(e) => Err(e),
        }
    }

    fn unusable(&self, reason: String) -> DirError {
        DirError::Unusable {
            path: self.path.clone(),
            reason,
        }
    }

    fn check_filesystem(&self) -> Result<(), DirError> {
        let (magic, read_only) = statfs(&self.dir).map_err(|e| self.unusable(e.to_string()))?;
        if let Some(filesystem) = refused_filesystem(magic) {
            return Err(DirError::Filesystem {
                path: self.path.clone(),
                filesystem,
                magic,
            });
        }
        if read_only {
            return Err(DirError::NotWritable {
                path: self.path.clone(),
                reason: "its filesystem is mounted read-only".to_string(),
            });
        }
        Ok(())
    }

    fn check_owner(&self) -> Result<(), DirError> {
        let metadata = self
            .dir
            .dir_metadata()
            .map_err(|e| self.unusable(e.to_string()))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let user = unsafe { libc::geteuid() };
        if metadata.uid() != user {
            return Err(DirError::OtherUser {
                path: self.path.clone(),
                owner: metadata.uid(),
                user,
            });
        }
        Ok(())
    }

    /// A process of another user holding a lock on one of the directory's
    /// files (the directory lock, a host's liveness lock, the database):
    /// read from the kernel's list of locks, `/proc/locks`.
    fn check_other_users(&self) -> Result<(), DirError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let user = unsafe { libc::geteuid() };
        let mut files: Vec<(String, u64, u64)> = Vec::new();
        let mut note = |name: String, metadata: &cap_std::fs::Metadata| {
            files.push((name, metadata.dev(), metadata.ino()));
        };
        for name in DATABASE_FILES.iter().chain([&DIR_LOCK_FILE]) {
            if let Ok(metadata) = self.dir.symlink_metadata(name) {
                note((*name).to_string(), &metadata);
            }
        }
        if let Ok(entries) = self.dir.read_dir(HOSTS_DIR) {
            for entry in entries.flatten() {
                if let Ok(metadata) = entry.metadata() {
                    note(
                        format!("{HOSTS_DIR}/{}", entry.file_name().to_string_lossy()),
                        &metadata,
                    );
                }
            }
        }
        if files.is_empty() {
            return Ok(());
        }
        let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
            // No list of locks to read (not Linux, or /proc not mounted):
            // the owner check above stands alone.
            return Ok(());
        };
        for (pid, device, inode) in locks.lines().filter_map(parse_lock_line) {
            let Some((file, ..)) = files
                .iter()
                .find(|(_, dev, ino)| same_device(*dev, device) && *ino == inode)
            else {
                continue;
            };
            if let Some(owner) = process_uid(pid)
                && owner != user
            {
                return Err(DirError::HeldByOtherUser {
                    path: self.path.clone(),
                    pid,
                    owner,
                    user,
                    file: file.clone(),
                });
            }
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<(), DirError> {
        let probe = format!(".leasehold-probe-{}", std::process::id());
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        options.mode(0o600);
        let created = self.dir.open_with(&probe, &options);
        match created {
            Ok(file) => {
                drop(file);
                self.dir
                    .remove_file(&probe)
                    .map_err(|e| DirError::NotWritable {
                        path: self.path.clone(),
                        reason: format!("a file created there cannot be removed: {e}"),
                    })
            }
            Err(e) => Err(DirError::NotWritable {
                path: self.path.clone(),
                reason: format!("creating a file there failed: {e}"),
            }),
        }
    }

    fn check_files(&self) -> Result<(), DirError> {
        for name in DATABASE_FILES.iter().chain([&DIR_LOCK_FILE]) {
            match self.dir.symlink_metadata(name) {
                Ok(metadata) if metadata.is_file() => {}
                Ok(_) => {
                    return Err(DirError::NotAFile {
                        path: self.path.clone(),
                        file: (*name).to_string(),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.unusable(format!("{name}: {e}"))),
            }
        }
        Ok(())
    }
}

/// `fstatfs` of the directory the handle holds: its filesystem's magic
/// and whether it is mounted read-only.
fn statfs(dir: &Dir) -> io::Result<(i64, bool)> {
    let fd = dir.as_raw_fd();
    let mut stats = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `fd` is an open descriptor owned by `dir` for this call, and
    // `stats` points at writable memory of the struct's size.
    let result = unsafe { libc::fstatfs(fd, stats.as_mut_ptr()) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs succeeded, so it filled the struct.
    let stats = unsafe { stats.assume_init() };
    let mut vfs = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: as above, for fstatvfs.
    let read_only = if unsafe { libc::fstatvfs(fd, vfs.as_mut_ptr()) } == 0 {
        // SAFETY: fstatvfs succeeded.
        let vfs = unsafe { vfs.assume_init() };
        vfs.f_flag & libc::ST_RDONLY != 0
    } else {
        false
    };
    #[allow(clippy::unnecessary_cast)]
    Ok((stats.f_type as i64 & 0xFFFF_FFFF, read_only))
}

/// One line of `/proc/locks`: the pid holding it and the `major:minor`
/// device and inode of the locked file. Lines of waiters (`->`) and
/// locks without an owner process are left out.
fn parse_lock_line(line: &str) -> Option<(u32, (u32, u32), u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(1) == Some(&"->") {
        return None;
    }
    // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"
    let pid: u32 = fields.get(4)?.parse().ok()?;
    let mut file = fields.get(5)?.split(':');
    let major = u32::from_str_radix(file.next()?, 16).ok()?;
    let minor = u32::from_str_radix(file.next()?, 16).ok()?;
    let inode = file.next()?.parse().ok()?;
    Some((pid, (major, minor), inode))
}

/// Whether the `st_dev` of a file is the `major:minor` `/proc/locks`
/// shows.
fn same_device(dev: u64, (major, minor): (u32, u32)) -> bool {
    libc::major(dev) == major && libc::minor(dev) == minor
}

/// The real uid of process `pid`, if it still runs.
fn process_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_and_user_space_filesystems_are_refused_by_magic() {
        assert_eq!(refused_filesystem(0x6969), Some("NFS"));
        assert_eq!(refused_filesystem(0xFF53_4D42), Some("CIFS"));
        assert_eq!(refused_filesystem(0xFE53_4D42), Some("SMB2"));
        assert_eq!(refused_filesystem(0x6573_5546), Some("FUSE"));
        // ext4, xfs, btrfs, tmpfs, overlayfs: local, accepted.
        for local in [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0x794C_7630] {
            assert_eq!(refused_filesystem(local), None, "{local:#x}");
        }
    }

    #[test]
    fn lock_lines_name_the_holder_and_the_file() {
        assert_eq!(
            parse_lock_line("1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"),
            Some((1234, (0xfd, 1), 5678))
        );
        assert_eq!(
            parse_lock_line("2: POSIX  ADVISORY  READ 99 00:2f:12 128 128"),
            Some((99, (0, 0x2f), 12))
        );
        assert_eq!(
            parse_lock_line("1: -> FLOCK  ADVISORY  WRITE 7 fd:01:5678 0 EOF"),
            None
        );
        assert_eq!(parse_lock_line("garbage"), None);
    }

    #[test]
    fn a_directory_is_created_checked_and_reached_through_its_handle() {
        let base = super::super::scratch_dir("data-dir-open");
        let path = base.join("nested/leasehold-data");
        let data = DataDir::open(&path).unwrap();
        assert!(path.is_dir());
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o700
        );
        data.ensure_dir(HOSTS_DIR).unwrap();
        let file = data.open_file(Path::new("hosts/a.lock")).unwrap();
        drop(file);
        assert!(path.join("hosts/a.lock").is_file());
        // A name that leads out of the directory is refused by the handle.
        assert!(data.open_file(Path::new("../escape")).is_err());
        std::os::unix::fs::symlink("/etc/passwd", path.join("hosts/link.lock")).unwrap();
        assert!(data.open_file(Path::new("hosts/link.lock")).is_err());
        crate::embedded::remove_scratch(&base);
    }

    #[test]
    fn a_database_file_that_is_a_symbolic_link_is_refused() {
        let base = super::super::scratch_dir("data-dir-link");
        std::fs::create_dir_all(&base).unwrap();
        std::os::unix::fs::symlink("/tmp/elsewhere.db", base.join(DATABASE_FILE)).unwrap();
        match DataDir::open(&base) {
            Err(e @ DirError::NotAFile { .. }) => {
                assert!(e.to_string().contains("leasehold.db"), "{e}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        crate::embedded::remove_scratch(&base);
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: changing a directory's owner needs root");
            return;
        }
        let base = super::super::scratch_dir("data-dir-owner");
        std::fs::create_dir_all(&base).unwrap();
        std::os::unix::fs::chown(&base, Some(65534), Some(65534)).unwrap();
        match DataDir::open(&base) {
            Err(e @ DirError::OtherUser { owner: 65534, .. }) => {
                assert!(e.to_string().contains("belongs to user 65534"), "{e}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        crate::embedded::remove_scratch(&base);
    }

    #[test]
    fn check_says_where_a_missing_directory_would_be_created() {
        let base = super::super::scratch_dir("data-dir-check");
        std::fs::create_dir_all(&base).unwrap();
        let note = DataDir::check(&base.join("a/b")).unwrap();
        assert!(note.contains("will be created"), "{note}");
        assert!(!base.join("a").exists(), "check creates nothing");
        let note = DataDir::check(&base).unwrap();
        assert!(note.contains("writable"), "{note}");
        crate::embedded::remove_scratch(&base);
    }
}
