//! The user's cache, where `leasehold build` installs the pinned tools:
//! `LEASEHOLD_CACHE_DIR`, else `$XDG_CACHE_HOME/leasehold`, else
//! `~/.cache/leasehold`. Never a folder of the project or of this
//! repository unless the user names one. Each tool folder is keyed by a
//! digest of its pins, so two versions of leasehold with different pins
//! keep their own, and is installed under an exclusive lock, so builds
//! running at once install it once.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::AuthorError;

/// The environment variable naming the cache folder.
pub const CACHE_ENV: &str = "LEASEHOLD_CACHE_DIR";

/// Where the cache is, by the environment `var` reads: `LEASEHOLD_CACHE_DIR`,
/// else `$XDG_CACHE_HOME/leasehold` (an absolute `XDG_CACHE_HOME` only, as
/// the XDG rules say), else `$HOME/.cache/leasehold`.
pub fn cache_root(var: &dyn Fn(&str) -> Option<OsString>) -> Result<PathBuf, AuthorError> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(dir) = set(CACHE_ENV) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(xdg) = set("XDG_CACHE_HOME").map(PathBuf::from)
        && xdg.is_absolute()
    {
        return Ok(xdg.join("leasehold"));
    }
    if let Some(home) = set("HOME") {
        return Ok(PathBuf::from(home).join(".cache").join("leasehold"));
    }
    Err(AuthorError::NoCache)
}

/// The cache of this process's environment.
pub fn user_cache() -> Result<PathBuf, AuthorError> {
    cache_root(&|name| std::env::var_os(name))
}

/// A short, stable name for what `pins` install: the first 16 hex digits
/// of their SHA-256.
pub fn digest(pins: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, pins.as_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The folder of the Python tools these pins install, under `cache`.
pub fn python_tools(cache: &Path, stamp: &str) -> PathBuf {
    cache.join("tools").join("python").join(digest(stamp))
}

/// The folder of the JavaScript tools these pins install, under `cache`.
pub fn js_tools(cache: &Path, stamp: &str) -> PathBuf {
    cache.join("tools").join("js").join(digest(stamp))
}

/// The file in a tool folder that records the pins installed there, in
/// the format `cargo xtask` writes too.
pub const STAMP: &str = "leasehold-pins.txt";

/// Whether `dir` holds exactly the tools `stamp` pins (its stamp file is
/// written last, after a complete install).
pub fn installed(dir: &Path, stamp: &str) -> bool {
    std::fs::read_to_string(dir.join(STAMP)).is_ok_and(|s| s == stamp)
}

/// An exclusive lock on a tool folder while it is checked and installed:
/// `flock` on `<folder>.lock`, released when dropped (or when the process
/// dies, so a killed build never leaves it held).
#[derive(Debug)]
pub struct ToolLock {
    _file: File,
}

impl ToolLock {
    /// Take the lock of tool folder `dir`, waiting at most `wait` for
    /// another build that installs it.
    pub fn take(dir: &Path, wait: Duration, poll: Duration) -> Result<Self, AuthorError> {
        let parent = dir.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(|e| AuthorError::Io {
            what: format!("create the cache folder {}", parent.display()),
            error: e,
        })?;
        let path = dir.with_extension("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| AuthorError::Io {
                what: format!("open the lock {}", path.display()),
                error: e,
            })?;
        let started = Instant::now();
        loop {
            if try_lock(&file)? {
                return Ok(Self { _file: file });
            }
            if started.elapsed() >= wait {
                return Err(AuthorError::ToolsBusy {
                    lock: path,
                    waited: wait,
                });
            }
            std::thread::sleep(poll);
        }
    }
}

/// One non-blocking attempt at an exclusive `flock`.
fn try_lock(file: &File) -> Result<bool, AuthorError> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this function borrows; no memory is
    // shared with the kernel.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EWOULDBLOCK) | Some(libc::EINTR) => Ok(false),
        _ => Err(AuthorError::Io {
            what: "lock a tool folder".to_string(),
            error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_cache_is_the_named_one_then_xdg_then_home() {
        let all = [
            (CACHE_ENV, "/srv/cache"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/home/a"),
        ];
        assert_eq!(cache_root(&env(&all)).unwrap(), Path::new("/srv/cache"));
        assert_eq!(
            cache_root(&env(&all[1..])).unwrap(),
            Path::new("/x/leasehold")
        );
        assert_eq!(
            cache_root(&env(&all[2..])).unwrap(),
            Path::new("/home/a/.cache/leasehold")
        );
        // A relative XDG_CACHE_HOME is ignored, as the XDG rules say; an
        // empty variable is unset.
        assert_eq!(
            cache_root(&env(&[
                (CACHE_ENV, ""),
                ("XDG_CACHE_HOME", "rel"),
                ("HOME", "/h")
            ]))
            .unwrap(),
            Path::new("/h/.cache/leasehold")
        );
        assert!(matches!(cache_root(&env(&[])), Err(AuthorError::NoCache)));
    }

    #[test]
    fn tool_folders_are_keyed_by_their_pins() {
        let cache = Path::new("/c");
        assert_eq!(python_tools(cache, "a==1"), python_tools(cache, "a==1"));
        assert_ne!(python_tools(cache, "a==1"), python_tools(cache, "a==2"));
        assert_eq!(digest("a==1").len(), 16);
        assert!(python_tools(cache, "a==1").starts_with("/c/tools/python"));
        assert!(js_tools(cache, "x").starts_with("/c/tools/js"));
    }

    #[test]
    fn a_tool_lock_is_exclusive_until_dropped() {
        let dir = std::env::temp_dir().join(format!("leasehold-lock-{}", std::process::id()));
        let tools = dir.join("tools").join("python").join("abc");
        let held = ToolLock::take(&tools, Duration::ZERO, Duration::from_millis(1)).unwrap();
        let refused = ToolLock::take(&tools, Duration::from_millis(30), Duration::from_millis(5));
        assert!(
            matches!(refused, Err(AuthorError::ToolsBusy { .. })),
            "{refused:?}"
        );
        drop(held);
        ToolLock::take(&tools, Duration::ZERO, Duration::from_millis(1)).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
