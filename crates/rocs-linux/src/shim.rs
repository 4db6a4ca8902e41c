//! Client of the kernel shim `/dev/rocs_shim` (`kmod-shim/`, GPL-2.0).
//!
//! The module moves a target's pages onto frames of chosen cache colours. Its ABI lives in
//! `kmod-shim/include/uapi/rocs_shim.h`; [`abi`] mirrors it, and `tests/shim_abi.rs`
//! compiles a C program against the header to check that sizes, offsets and ioctl numbers
//! agree. [`ShimClient`] implements [`rocs_core::Remapper`] over the ioctls, and [`probe`]
//! tells `rocsctl doctor` whether the shim is there and what to do when it is not.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno as NixErrno;
use rocs_core::{Colour, Errno, PageResult, Pid, Placement, Remapper, VirtPage};
use serde::Serialize;

/// The device the module creates.
pub const DEVICE: &str = "/dev/rocs_shim";

/// How to get the module, said wherever it is missing.
const HOW_TO_LOAD: &str = "load it with `modprobe rocs_shim` (build and install it from \
     kmod-shim/ with `make && sudo make install`, or `dkms add ./kmod-shim && dkms install \
     rocs-shim/2`)";

/// The ABI of `kmod-shim/include/uapi/rocs_shim.h`, field for field.
pub mod abi {
    /// `ROCS_SHIM_ABI_VERSION`: the ABI this client speaks.
    pub const ABI_VERSION: u32 = 2;
    pub const MAX_COLOURS: usize = 1024;
    pub const MASK_WORDS: usize = MAX_COLOURS / 64;
    pub const MAX_PAGES: u64 = 1 << 16;
    pub const MAX_POOL_LIMIT: u64 = 1 << 20;

    pub const POLLUTE: u32 = 1;
    pub const RESTORE: u32 = 2;
    /// Onto the ordinary colour `Pages::colour`, else any other ordinary colour.
    pub const ORDINARY: u32 = 3;

    pub const CONFIG_PREFILL: u32 = 1;

    pub const FAIL_UNMAPPED: usize = 0;
    pub const FAIL_NOT_PRESENT: usize = 1;
    pub const FAIL_SHARED: usize = 2;
    pub const FAIL_UNSUPPORTED: usize = 3;
    pub const FAIL_BUSY: usize = 4;
    pub const FAIL_NOMEM: usize = 5;
    pub const FAIL_EXITED: usize = 6;
    pub const FAIL_NR: usize = 8;

    pub const IOC_MAGIC: u8 = 0xD3;
    pub const IOC_INFO: u64 = nix::request_code_read!(IOC_MAGIC, 0x00, size_of::<Info>()) as u64;
    pub const IOC_CONFIGURE: u64 =
        nix::request_code_write!(IOC_MAGIC, 0x01, size_of::<Config>()) as u64;
    pub const IOC_MIGRATE: u64 =
        nix::request_code_readwrite!(IOC_MAGIC, 0x02, size_of::<Pages>()) as u64;
    pub const IOC_QUERY: u64 =
        nix::request_code_readwrite!(IOC_MAGIC, 0x03, size_of::<Pages>()) as u64;
    pub const IOC_STATS: u64 = nix::request_code_read!(IOC_MAGIC, 0x04, size_of::<Stats>()) as u64;

    use std::mem::size_of;

    /// `struct rocs_shim_info`
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Info {
        pub abi_version: u32,
        pub page_shift: u32,
        pub colours: u32,
        pub max_colours: u32,
        pub max_pages: u64,
        pub pool_limit: u64,
        pub pool_frames: u64,
        pub pollute_mask: [u64; MASK_WORDS],
    }

    /// `struct rocs_shim_config`
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Config {
        pub colours: u32,
        pub flags: u32,
        pub pool_limit: u64,
        pub pollute_mask: [u64; MASK_WORDS],
    }

    /// `struct rocs_shim_pages`
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Pages {
        pub pid: u32,
        pub placement: u32,
        pub count: u64,
        pub addrs: u64,
        pub status: u64,
        /// MIGRATE to [`ORDINARY`]: the colour; else 0.
        pub colour: u32,
        pub flags: u32,
        pub moved: u64,
    }

    /// `struct rocs_shim_stats`
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Stats {
        pub migrated_pollute: u64,
        pub migrated_restore: u64,
        pub already_placed: u64,
        pub failures: [u64; FAIL_NR],
        pub frames_allocated: u64,
        pub frames_released: u64,
        pub pool_frames: u64,
        pub colours: u32,
        pub reserved: u32,
        pub held_by_colour: [u64; MAX_COLOURS],
    }

    impl Default for Stats {
        fn default() -> Self {
            Stats {
                migrated_pollute: 0,
                migrated_restore: 0,
                already_placed: 0,
                failures: [0; FAIL_NR],
                frames_allocated: 0,
                frames_released: 0,
                pool_frames: 0,
                colours: 0,
                reserved: 0,
                held_by_colour: [0; MAX_COLOURS],
            }
        }
    }

    nix::ioctl_read!(info, IOC_MAGIC, 0x00, Info);
    nix::ioctl_write_ptr!(configure, IOC_MAGIC, 0x01, Config);
    nix::ioctl_readwrite!(migrate, IOC_MAGIC, 0x02, Pages);
    nix::ioctl_readwrite!(query, IOC_MAGIC, 0x03, Pages);
    nix::ioctl_read!(stats, IOC_MAGIC, 0x04, Stats);
}

/// What can go wrong talking to the shim.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("{} does not exist: the rocs_shim kernel module is not loaded; {HOW_TO_LOAD}", path.display())]
    NotLoaded { path: PathBuf },
    #[error("{} may only be used by root (CAP_SYS_ADMIN): run rocsd as root", path.display())]
    PermissionDenied { path: PathBuf },
    #[error(
        "the loaded rocs_shim speaks ABI {found}, this rocs speaks ABI {expected}: unload it \
         (`rmmod rocs_shim`) and install the module of this rocs release from kmod-shim/"
    )]
    AbiMismatch { expected: u32, found: u32 },
    #[error("process {pid} is gone, or not one the shim can move (a kernel thread)")]
    TargetGone { pid: Pid },
    #[error("not permitted to move the pages of process {pid}: the caller needs CAP_SYS_ADMIN, and CAP_SYS_PTRACE for another user's process")]
    NotPermitted { pid: Pid },
    #[error("invalid shim configuration: {0}")]
    InvalidConfig(String),
    #[error("{op} on {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The module's identity and configuration (`INFO`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShimInfo {
    pub abi_version: u32,
    pub page_shift: u32,
    pub colours: u32,
    pub max_pages: u64,
    pub pool_limit: u64,
    pub pool_frames: u64,
    pub pollute: Vec<Colour>,
}

/// What `CONFIGURE` sets: the colour geometry of the LLC, the pollute colours, the stash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShimConfig {
    /// Colours of the LLC (sets per slice * line size / page size), a power of two.
    pub colours: u32,
    /// The colours of the pollute buffer: at least one, not all.
    pub pollute: Vec<Colour>,
    /// Most frames the module keeps sorted by colour (half for the pollute colours).
    pub pool_limit: u64,
    /// Fill the pollute colours' share of the stash now rather than on the first MIGRATE.
    pub prefill: bool,
}

impl ShimConfig {
    /// The ABI struct, or why the module would refuse this configuration.
    pub fn to_abi(&self) -> Result<abi::Config, ShimError> {
        let bad = |m: String| Err(ShimError::InvalidConfig(m));
        if !(2..=abi::MAX_COLOURS as u32).contains(&self.colours) || !self.colours.is_power_of_two()
        {
            return bad(format!(
                "{} colours: need a power of two from 2 to {}",
                self.colours,
                abi::MAX_COLOURS
            ));
        }
        if self.pool_limit > abi::MAX_POOL_LIMIT {
            return bad(format!(
                "pool limit {} frames: at most {}",
                self.pool_limit,
                abi::MAX_POOL_LIMIT
            ));
        }
        let mut mask = [0u64; abi::MASK_WORDS];
        for &Colour(c) in &self.pollute {
            if c >= self.colours {
                return bad(format!(
                    "pollute colour {c} of only {} colours",
                    self.colours
                ));
            }
            mask[c as usize / 64] |= 1 << (c % 64);
        }
        let count: u32 = mask.iter().map(|w| w.count_ones()).sum();
        if count == 0 {
            return bad("no pollute colour".into());
        }
        if count == self.colours {
            return bad(
                "every colour is a pollute colour: Restore would have nowhere to go".into(),
            );
        }
        Ok(abi::Config {
            colours: self.colours,
            flags: if self.prefill { abi::CONFIG_PREFILL } else { 0 },
            pool_limit: self.pool_limit,
            pollute_mask: mask,
        })
    }
}

/// Pages that did not move, by reason, since the module was loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FailureCounts {
    /// No mapping at the address (EFAULT).
    pub unmapped: u64,
    /// Never touched, or the zero page (ENOENT).
    pub not_present: u64,
    /// MAP_SHARED memory (EACCES).
    pub shared: u64,
    /// File-backed, hugetlbfs, KSM or special mappings (EOPNOTSUPP).
    pub unsupported: u64,
    /// The kernel would not isolate or move the page (EBUSY).
    pub busy: u64,
    /// No free frame of a wanted colour (ENOMEM).
    pub no_frame: u64,
    /// The target exited during the call (ESRCH).
    pub exited: u64,
}

/// The module's counters (`STATS`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShimStats {
    pub migrated_pollute: u64,
    pub migrated_restore: u64,
    pub already_placed: u64,
    pub failures: FailureCounts,
    pub frames_allocated: u64,
    pub frames_released: u64,
    pub pool_frames: u64,
    /// Frames the stash holds, per colour in use.
    pub held_by_colour: Vec<u64>,
}

impl From<&abi::Stats> for ShimStats {
    fn from(s: &abi::Stats) -> Self {
        let colours = (s.colours as usize).min(abi::MAX_COLOURS);
        ShimStats {
            migrated_pollute: s.migrated_pollute,
            migrated_restore: s.migrated_restore,
            already_placed: s.already_placed,
            failures: FailureCounts {
                unmapped: s.failures[abi::FAIL_UNMAPPED],
                not_present: s.failures[abi::FAIL_NOT_PRESENT],
                shared: s.failures[abi::FAIL_SHARED],
                unsupported: s.failures[abi::FAIL_UNSUPPORTED],
                busy: s.failures[abi::FAIL_BUSY],
                no_frame: s.failures[abi::FAIL_NOMEM],
                exited: s.failures[abi::FAIL_EXITED],
            },
            frames_allocated: s.frames_allocated,
            frames_released: s.frames_released,
            pool_frames: s.pool_frames,
            held_by_colour: s.held_by_colour[..colours].to_vec(),
        }
    }
}

/// An open `/dev/rocs_shim` whose ABI matches this client.
#[derive(Debug)]
pub struct ShimClient {
    file: File,
    path: PathBuf,
    page_shift: u32,
    max_pages: u64,
}

impl ShimClient {
    /// Open [`DEVICE`] and check its ABI version.
    pub fn open() -> Result<Self, ShimError> {
        Self::open_path(DEVICE)
    }

    /// Open the shim's device at `path` and check its ABI version.
    pub fn open_path(path: impl AsRef<Path>) -> Result<Self, ShimError> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => ShimError::NotLoaded { path: path.clone() },
                io::ErrorKind::PermissionDenied => {
                    ShimError::PermissionDenied { path: path.clone() }
                }
                _ => ShimError::Io {
                    op: "open",
                    path: path.clone(),
                    source: e,
                },
            })?;
        let mut client = ShimClient {
            file,
            path,
            page_shift: 12,
            max_pages: abi::MAX_PAGES,
        };
        let info = client.raw_info()?;
        if info.abi_version != abi::ABI_VERSION {
            return Err(ShimError::AbiMismatch {
                expected: abi::ABI_VERSION,
                found: info.abi_version,
            });
        }
        client.page_shift = info.page_shift;
        client.max_pages = info.max_pages.clamp(1, abi::MAX_PAGES);
        Ok(client)
    }

    /// log2 of the page size the module works in: a [`VirtPage`] `p` is at `p << page_shift`.
    pub fn page_shift(&self) -> u32 {
        self.page_shift
    }

    fn io_error(&self, op: &'static str, e: NixErrno) -> ShimError {
        if e == NixErrno::EPERM {
            return ShimError::PermissionDenied {
                path: self.path.clone(),
            };
        }
        ShimError::Io {
            op,
            path: self.path.clone(),
            source: io::Error::from_raw_os_error(e as i32),
        }
    }

    fn raw_info(&self) -> Result<abi::Info, ShimError> {
        let mut info = abi::Info::default();
        // SAFETY: the fd is open for the struct's whole lifetime; `info` is a valid,
        // writable `struct rocs_shim_info`, the exact size the ioctl number encodes.
        unsafe { abi::info(self.file.as_raw_fd(), &mut info) }
            .map_err(|e| self.io_error("INFO", e))?;
        Ok(info)
    }

    /// The module's ABI version, geometry and configuration.
    pub fn info(&self) -> Result<ShimInfo, ShimError> {
        let info = self.raw_info()?;
        Ok(ShimInfo {
            abi_version: info.abi_version,
            page_shift: info.page_shift,
            colours: info.colours,
            max_pages: info.max_pages,
            pool_limit: info.pool_limit,
            pool_frames: info.pool_frames,
            pollute: mask_colours(&info.pollute_mask, info.colours),
        })
    }

    /// Set the colour geometry, the pollute colours and the stash bound. The module gives
    /// back the frames it held for the old configuration.
    pub fn configure(&self, config: &ShimConfig) -> Result<(), ShimError> {
        let raw = config.to_abi()?;
        // SAFETY: `raw` is a valid `struct rocs_shim_config` that outlives the call; the
        // module only reads it.
        unsafe { abi::configure(self.file.as_raw_fd(), &raw) }
            .map_err(|e| self.io_error("CONFIGURE", e))?;
        Ok(())
    }

    /// Pages moved, failures by reason, and the frames the module holds by colour.
    pub fn stats(&self) -> Result<ShimStats, ShimError> {
        let mut raw = Box::<abi::Stats>::default();
        // SAFETY: `raw` points to a valid, writable `struct rocs_shim_stats` of the size
        // the ioctl number encodes, alive for the whole call.
        unsafe { abi::stats(self.file.as_raw_fd(), &mut *raw) }
            .map_err(|e| self.io_error("STATS", e))?;
        Ok(ShimStats::from(&*raw))
    }

    /// MIGRATE (Some placement) or QUERY (None) for `pages`, in calls of at most
    /// `max_pages`. Pages whose address does not fit in 64 bits get EFAULT without asking.
    /// The module refuses a whole MIGRATE to [`Placement::Ordinary`] with EINVAL when the
    /// colour is not an ordinary colour in use: its pages get EINVAL each, as the
    /// simulator answers, and stay where they are.
    fn pages(
        &self,
        pid: Pid,
        pages: &[VirtPage],
        placement: Option<Placement>,
    ) -> Result<Vec<PageResult>, ShimError> {
        let mut results = vec![Err(Errno::EFAULT); pages.len()];
        let (addrs, index): (Vec<u64>, Vec<usize>) = pages
            .iter()
            .enumerate()
            .filter_map(|(i, p)| page_address(*p, self.page_shift).map(|a| (a, i)))
            .unzip();
        let mut status = vec![0i32; addrs.len()];
        for (addr_chunk, status_chunk) in addrs
            .chunks(self.max_pages as usize)
            .zip(status.chunks_mut(self.max_pages as usize))
        {
            let (placement_word, colour) = match placement {
                Some(Placement::Pollute) => (abi::POLLUTE, 0),
                Some(Placement::Restore) => (abi::RESTORE, 0),
                Some(Placement::Ordinary(Colour(c))) => (abi::ORDINARY, c),
                None => (0, 0),
            };
            let mut req = abi::Pages {
                pid,
                placement: placement_word,
                count: addr_chunk.len() as u64,
                addrs: addr_chunk.as_ptr() as u64,
                status: status_chunk.as_mut_ptr() as u64,
                colour,
                flags: 0,
                moved: 0,
            };
            let fd = self.file.as_raw_fd();
            // SAFETY: `req` is a valid `struct rocs_shim_pages`; its `addrs` points to
            // `count` readable u64 and its `status` to `count` writable i32, both borrowed
            // for the whole call and not touched by anything else meanwhile.
            let rc = unsafe {
                match placement {
                    Some(_) => abi::migrate(fd, &mut req),
                    None => abi::query(fd, &mut req),
                }
            };
            if let (Err(NixErrno::EINVAL), Some(Placement::Ordinary(_))) = (rc, placement) {
                // Not an ordinary colour: nothing of this call moved.
                status_chunk.fill(-libc::EINVAL);
                continue;
            }
            rc.map_err(|e| match e {
                NixErrno::ESRCH => ShimError::TargetGone { pid },
                NixErrno::EPERM => ShimError::NotPermitted { pid },
                e => self.io_error(
                    if placement.is_some() {
                        "MIGRATE"
                    } else {
                        "QUERY"
                    },
                    e,
                ),
            })?;
        }
        for (s, i) in status.into_iter().zip(index) {
            results[i] = status_result(s);
        }
        Ok(results)
    }
}

impl Remapper for ShimClient {
    type Error = ShimError;

    fn migrate(
        &mut self,
        pid: Pid,
        pages: &[VirtPage],
        to: Placement,
    ) -> Result<Vec<PageResult>, ShimError> {
        if pages.is_empty() {
            return Ok(Vec::new());
        }
        self.pages(pid, pages, Some(to))
    }

    fn query(&mut self, pid: Pid, pages: &[VirtPage]) -> Result<Vec<PageResult>, ShimError> {
        if pages.is_empty() {
            return Ok(Vec::new());
        }
        self.pages(pid, pages, None)
    }
}

/// The first byte of `page`, if it fits in 64 bits.
fn page_address(page: VirtPage, page_shift: u32) -> Option<u64> {
    (page.0 <= u64::MAX >> page_shift).then(|| page.0 << page_shift)
}

/// A status word of MIGRATE or QUERY: the colour now, or a negative errno.
fn status_result(status: i32) -> PageResult {
    if status >= 0 {
        Ok(Colour(status as u32))
    } else {
        Err(Errno(status.saturating_neg()))
    }
}

/// The colours set in a mask of `colours` bits.
fn mask_colours(mask: &[u64; abi::MASK_WORDS], colours: u32) -> Vec<Colour> {
    (0..colours.min(abi::MAX_COLOURS as u32))
        .filter(|c| mask[*c as usize / 64] >> (c % 64) & 1 == 1)
        .map(Colour)
        .collect()
}

/// Whether the shim can be used, for `rocsctl doctor`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShimStatus {
    /// The module is loaded (its /sys/module entry or its device exists).
    pub loaded: bool,
    /// The ABI version the loaded module reported, when it could be asked.
    pub abi_version: Option<u32>,
    /// The shim is loaded, speaks this client's ABI, and this process may use it.
    pub usable: bool,
    /// What to do about it, in one sentence ("nothing" when usable).
    pub what_to_do: String,
}

/// Look at the shim as `rocsctl doctor` reports it.
pub fn probe() -> ShimStatus {
    probe_at(Path::new(DEVICE), Path::new("/sys/module/rocs_shim"))
}

/// [`probe`] with the device and the module's sysfs directory given (for tests).
pub fn probe_at(device: &Path, sys_module: &Path) -> ShimStatus {
    let module_loaded = sys_module.exists();
    let status = |loaded, abi_version, usable, what: String| ShimStatus {
        loaded,
        abi_version,
        usable,
        what_to_do: what,
    };
    match ShimClient::open_path(device) {
        // open_path checked that the module speaks this client's ABI.
        Ok(_) => status(true, Some(abi::ABI_VERSION), true, "nothing".into()),
        Err(ShimError::NotLoaded { .. }) if module_loaded => status(
            true,
            None,
            false,
            format!(
                "rocs_shim is loaded but {} is missing: mount devtmpfs on /dev or let udev create it",
                device.display()
            ),
        ),
        Err(ShimError::NotLoaded { .. }) => {
            status(false, None, false, format!("rocs_shim is not loaded: {HOW_TO_LOAD}"))
        }
        Err(ShimError::AbiMismatch { found, .. }) => status(
            true,
            Some(found),
            false,
            ShimError::AbiMismatch {
                expected: abi::ABI_VERSION,
                found,
            }
            .to_string(),
        ),
        Err(e @ ShimError::PermissionDenied { .. }) => status(true, None, false, e.to_string()),
        Err(e) => status(module_loaded, None, false, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_words_become_colours_or_errnos() {
        assert_eq!(status_result(0), Ok(Colour(0)));
        assert_eq!(status_result(17), Ok(Colour(17)));
        assert_eq!(status_result(-14), Err(Errno::EFAULT));
        assert_eq!(status_result(-16), Err(Errno::EBUSY));
        assert_eq!(status_result(i32::MIN), Err(Errno(i32::MAX)));
    }

    #[test]
    fn page_numbers_become_addresses() {
        assert_eq!(
            page_address(VirtPage(0x7f12_3456), 12),
            Some(0x07f1_2345_6000)
        );
        assert_eq!(page_address(VirtPage(u64::MAX >> 12), 12), Some(!0xfff));
        assert_eq!(page_address(VirtPage((u64::MAX >> 12) + 1), 12), None);
    }

    #[test]
    fn config_is_checked_like_the_module_checks_it() {
        let ok = ShimConfig {
            colours: 128,
            pollute: vec![Colour(0), Colour(127), Colour(64)],
            pool_limit: 4096,
            prefill: true,
        };
        let raw = ok.to_abi().unwrap();
        assert_eq!(raw.colours, 128);
        assert_eq!(raw.flags, abi::CONFIG_PREFILL);
        assert_eq!(raw.pollute_mask[0], 1);
        assert_eq!(raw.pollute_mask[1], 1 | 1 << 63);
        assert_eq!(
            mask_colours(&raw.pollute_mask, 128),
            vec![Colour(0), Colour(64), Colour(127)]
        );

        let bad = |c: ShimConfig| matches!(c.to_abi(), Err(ShimError::InvalidConfig(_)));
        assert!(bad(ShimConfig {
            colours: 12,
            ..ok.clone()
        }));
        assert!(bad(ShimConfig {
            colours: 1,
            pollute: vec![Colour(0)],
            ..ok.clone()
        }));
        assert!(bad(ShimConfig {
            colours: 2048,
            ..ok.clone()
        }));
        assert!(bad(ShimConfig {
            pollute: vec![],
            ..ok.clone()
        }));
        assert!(bad(ShimConfig {
            pollute: vec![Colour(128)],
            ..ok.clone()
        }));
        assert!(bad(ShimConfig {
            colours: 2,
            pollute: vec![Colour(0), Colour(1)],
            ..ok.clone()
        }));
        assert!(bad(ShimConfig {
            pool_limit: abi::MAX_POOL_LIMIT + 1,
            ..ok.clone()
        }));
    }

    #[test]
    fn stats_keep_only_the_colours_in_use() {
        let mut raw = abi::Stats {
            colours: 4,
            ..Default::default()
        };
        raw.held_by_colour[..5].copy_from_slice(&[1, 2, 3, 4, 99]);
        raw.failures[abi::FAIL_BUSY] = 7;
        raw.failures[abi::FAIL_EXITED] = 2;
        let stats = ShimStats::from(&raw);
        assert_eq!(stats.held_by_colour, vec![1, 2, 3, 4]);
        assert_eq!(stats.failures.busy, 7);
        assert_eq!(stats.failures.exited, 2);
    }

    #[test]
    fn probe_says_what_to_do_without_the_module() {
        let dir = tempfile::tempdir().unwrap();
        let missing = probe_at(&dir.path().join("rocs_shim"), &dir.path().join("module"));
        assert!(!missing.loaded && !missing.usable && missing.abi_version.is_none());
        assert!(
            missing.what_to_do.contains("modprobe rocs_shim"),
            "{}",
            missing.what_to_do
        );

        // Loaded (sysfs entry present) but no device node.
        let node_missing = probe_at(&dir.path().join("rocs_shim"), dir.path());
        assert!(node_missing.loaded && !node_missing.usable);
        assert!(
            node_missing.what_to_do.contains("devtmpfs"),
            "{}",
            node_missing.what_to_do
        );
    }

    #[test]
    fn a_file_that_is_not_the_shim_is_an_io_error() {
        // /dev/null answers every ioctl with ENOTTY.
        match ShimClient::open_path("/dev/null") {
            Err(ShimError::Io {
                op: "INFO", source, ..
            }) => {
                assert_eq!(source.raw_os_error(), Some(libc::ENOTTY))
            }
            other => panic!("expected an INFO error, got {other:?}"),
        }
    }
}
