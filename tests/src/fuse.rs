//! A FUSE filesystem served by the test itself: an empty, read-only root
//! directory, answered by a thread reading `/dev/fuse`. Enough for a
//! process to find the mount point, open it and ask `statfs` what it is
//! (the kernel says FUSE), which is what the embedded backend's refusal of
//! user-space filesystems is tested with; nothing can be created there.
//!
//! Needs root (or `CAP_SYS_ADMIN`) and `/dev/fuse`: [`FuseMount::start`]
//! answers `None` where either is missing, and the caller skips.
//!
//! Only the kernel's requests such a probe makes are answered (`INIT`,
//! `GETATTR`, `STATFS`, `LOOKUP`, `OPENDIR`, `RELEASEDIR`); every other one
//! gets `ENOSYS`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const INIT: u32 = 26;
const GETATTR: u32 = 3;
const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const STATFS: u32 = 17;
const OPENDIR: u32 = 27;
const RELEASEDIR: u32 = 29;
const BATCH_FORGET: u32 = 42;
const DESTROY: u32 = 38;

/// The length of `struct fuse_in_header`.
const IN_HEADER: usize = 40;

/// A mounted test filesystem; unmounted (lazily) when dropped.
pub struct FuseMount {
    at: PathBuf,
}

impl FuseMount {
    /// Mount at `at` (an existing, empty folder) and serve it.
    pub fn start(at: &Path) -> Option<Self> {
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .ok()?;
        let options = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            device.as_raw_fd()
        );
        let target = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).ok()?;
        let source = c"leasehold-test";
        let kind = c"fuse";
        let data = std::ffi::CString::new(options).ok()?;
        // SAFETY: every pointer is a valid NUL-terminated string that
        // outlives the call; `data` names an open descriptor of /dev/fuse.
        let mounted = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                kind.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        if mounted != 0 {
            return None;
        }
        std::thread::spawn(move || serve(device));
        Some(Self {
            at: at.to_path_buf(),
        })
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if let Ok(target) = std::ffi::CString::new(self.at.as_os_str().as_encoded_bytes()) {
            // SAFETY: a valid NUL-terminated path. Lazy: the serving thread
            // sees the device closed and ends.
            unsafe {
                libc::umount2(target.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

/// Answer the kernel's requests until the filesystem is unmounted.
fn serve(mut device: File) {
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = match device.read(&mut buffer) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) => return,
        };
        if n < IN_HEADER {
            continue;
        }
        let request = &buffer[..n];
        let opcode = u32::from_ne_bytes(request[4..8].try_into().unwrap());
        let unique = u64::from_ne_bytes(request[8..16].try_into().unwrap());
        let body = &request[IN_HEADER..];
        let reply: Result<Vec<u8>, i32> = match opcode {
            FORGET | BATCH_FORGET => continue,
            INIT => {
                let max_readahead = u32::from_ne_bytes(body[8..12].try_into().unwrap());
                let mut out = Vec::with_capacity(64);
                out.extend(7u32.to_ne_bytes()); // major
                out.extend(31u32.to_ne_bytes()); // minor
                out.extend(max_readahead.to_ne_bytes());
                out.extend(0u32.to_ne_bytes()); // flags
                out.extend(1u16.to_ne_bytes()); // max_background
                out.extend(1u16.to_ne_bytes()); // congestion_threshold
                out.extend(4096u32.to_ne_bytes()); // max_write
                out.extend(1u32.to_ne_bytes()); // time_gran
                out.resize(64, 0);
                Ok(out)
            }
            GETATTR => {
                let mut out = Vec::with_capacity(104);
                out.extend(1u64.to_ne_bytes()); // attr_valid
                out.extend(0u32.to_ne_bytes()); // attr_valid_nsec
                out.extend(0u32.to_ne_bytes()); // dummy
                out.extend(1u64.to_ne_bytes()); // ino
                out.extend(0u64.to_ne_bytes()); // size
                out.extend(0u64.to_ne_bytes()); // blocks
                out.extend([0u8; 24]); // atime, mtime, ctime
                out.extend([0u8; 12]); // their nanoseconds
                out.extend((libc::S_IFDIR | 0o555).to_ne_bytes()); // mode
                out.extend(2u32.to_ne_bytes()); // nlink
                out.extend(0u32.to_ne_bytes()); // uid
                out.extend(0u32.to_ne_bytes()); // gid
                out.extend(0u32.to_ne_bytes()); // rdev
                out.extend(4096u32.to_ne_bytes()); // blksize
                out.extend(0u32.to_ne_bytes()); // flags
                Ok(out)
            }
            STATFS => {
                let mut out = Vec::with_capacity(80);
                for value in [1u64, 1, 1, 1, 1] {
                    out.extend(value.to_ne_bytes()); // blocks, free, avail, files, ffree
                }
                out.extend(4096u32.to_ne_bytes()); // bsize
                out.extend(255u32.to_ne_bytes()); // namelen
                out.extend(4096u32.to_ne_bytes()); // frsize
                out.resize(80, 0);
                Ok(out)
            }
            OPENDIR => Ok(vec![0u8; 16]), // fh 0, no flags
            RELEASEDIR => Ok(Vec::new()),
            LOOKUP => Err(libc::ENOENT),
            DESTROY => return,
            _ => Err(libc::ENOSYS),
        };
        let (error, payload) = match reply {
            Ok(payload) => (0i32, payload),
            Err(errno) => (-errno, Vec::new()),
        };
        let mut out = Vec::with_capacity(16 + payload.len());
        out.extend(((16 + payload.len()) as u32).to_ne_bytes());
        out.extend(error.to_ne_bytes());
        out.extend(unique.to_ne_bytes());
        out.extend(payload);
        if device.write_all(&out).is_err() {
            return;
        }
    }
}
