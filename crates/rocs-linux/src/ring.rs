//! The mmap ring of a perf event, drained in place.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// A record as it sits in the ring: type, misc and body (after the 8-byte header).
#[derive(Clone, Copy, Debug)]
pub struct RawRecord<'a> {
    pub type_: u32,
    pub misc: u16,
    pub body: &'a [u8],
}

/// Walk the records between `tail` and `head` of a ring data area (`data.len()` is the
/// ring size, a power of two). A record that wraps past the end is copied into
/// `scratch` (64 KiB, enough for any record); all others are passed in place. Returns
/// the new tail. A corrupt header (size < 8) ends the walk at `head`.
#[inline]
pub fn drain_records(
    data: &[u8],
    tail: u64,
    head: u64,
    scratch: &mut [u8; 65536],
    mut f: impl FnMut(RawRecord<'_>),
) -> u64 {
    let size = data.len() as u64;
    let mask = size - 1;
    let mut pos = tail;
    while pos < head {
        let off = (pos & mask) as usize;
        // Records are 8-byte aligned and the ring size is a multiple of 8, so a header
        // never wraps.
        let hdr = &data[off..off + 8];
        let type_ = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let misc = u16::from_le_bytes([hdr[4], hdr[5]]);
        let len = u16::from_le_bytes([hdr[6], hdr[7]]) as usize;
        if len < 8 || pos + len as u64 > head {
            return head;
        }
        let end = off + len;
        if end <= data.len() {
            f(RawRecord {
                type_,
                misc,
                body: &data[off + 8..end],
            });
        } else {
            let first = data.len() - off;
            scratch[..first].copy_from_slice(&data[off..]);
            scratch[first..len].copy_from_slice(&data[..len - first]);
            f(RawRecord {
                type_,
                misc,
                body: &scratch[8..len],
            });
        }
        pos += len as u64;
    }
    pos
}

/// An mmap'ed perf ring: one metadata page, then `data_size` bytes of records.
pub struct Ring {
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    scratch: Box<[u8; 65536]>,
}

// SAFETY: the ring is a private mapping owned by this value; moving it between threads
// moves the only handle to it.
unsafe impl Send for Ring {}

// Offsets in struct perf_event_mmap_page (include/uapi/linux/perf_event.h).
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
const DATA_OFFSET: usize = 1040;
const DATA_SIZE: usize = 1048;

impl Ring {
    /// Map a ring of `pages` data pages (a power of two) for the perf event `fd`.
    pub fn map(fd: RawFd, pages: usize) -> io::Result<Ring> {
        let page = crate::geometry::page_size() as usize;
        assert!(pages.is_power_of_two());
        let map_len = page * (pages + 1);
        // SAFETY: a fresh shared mapping of a perf fd; the kernel checks fd and length.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base as *mut u8;
        // SAFETY: the metadata page is mapped and the kernel filled data_offset and
        // data_size before mmap returned (Linux >= 4.1); fall back to the classic layout.
        let (mut data_offset, mut data_size) = unsafe {
            (
                (base.add(DATA_OFFSET) as *const u64).read_volatile() as usize,
                (base.add(DATA_SIZE) as *const u64).read_volatile() as usize,
            )
        };
        if data_offset == 0 || data_size == 0 {
            data_offset = page;
            data_size = page * pages;
        }
        Ok(Ring {
            base,
            map_len,
            data_offset,
            data_size,
            scratch: Box::new([0; 65536]),
        })
    }

    fn head_tail(&self) -> (&AtomicU64, &AtomicU64) {
        // SAFETY: both words lie in the mapped metadata page, are 8-byte aligned, and
        // are only accessed atomically here; the kernel writes head, we write tail.
        unsafe {
            (
                &*(self.base.add(DATA_HEAD) as *const AtomicU64),
                &*(self.base.add(DATA_TAIL) as *const AtomicU64),
            )
        }
    }

    /// Hand every pending record to `f`, then free their space for the kernel.
    pub fn drain(&mut self, f: impl FnMut(RawRecord<'_>)) {
        let (head_a, tail_a) = self.head_tail();
        // Acquire pairs with the kernel's release of data_head: records before head are
        // fully written.
        let head = head_a.load(Ordering::Acquire);
        let tail = tail_a.load(Ordering::Relaxed);
        // SAFETY: the data area is mapped for data_size bytes at data_offset; the kernel
        // does not write the bytes between tail and head until we advance tail.
        let data =
            unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) };
        let new_tail = drain_records(data, tail, head, &mut self.scratch, f);
        // Release: our reads of the records happen before the kernel may reuse them.
        self.head_tail().1.store(new_tail, Ordering::Release);
    }
}

impl Ring {
    /// Look at the pending records without consuming them.
    pub fn peek(&self, f: impl FnMut(RawRecord<'_>)) {
        let (head_a, tail_a) = self.head_tail();
        let head = head_a.load(Ordering::Acquire);
        let tail = tail_a.load(Ordering::Relaxed);
        // SAFETY: as in `drain`; the tail is not moved, so the kernel keeps the records.
        let data =
            unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) };
        let mut scratch = Box::new([0u8; 65536]);
        drain_records(data, tail, head, &mut scratch, f);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `map`.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_records_are_reassembled() {
        let mut data = vec![0u8; 64];
        // One 24-byte record starting at offset 48: wraps 8 bytes into the start.
        let mut rec = Vec::new();
        rec.extend_from_slice(&9u32.to_le_bytes());
        rec.extend_from_slice(&0u16.to_le_bytes());
        rec.extend_from_slice(&24u16.to_le_bytes());
        rec.extend_from_slice(&0xAAu64.to_le_bytes());
        rec.extend_from_slice(&0xBBu64.to_le_bytes());
        data[48..64].copy_from_slice(&rec[..16]);
        data[..8].copy_from_slice(&rec[16..]);
        let mut scratch = Box::new([0u8; 65536]);
        let mut seen = Vec::new();
        let tail = drain_records(&data, 48, 72, &mut scratch, |r| {
            seen.push((r.type_, r.body.to_vec()))
        });
        assert_eq!(tail, 72);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].1[8..16], 0xBBu64.to_le_bytes());
        // A corrupt header stops at head rather than looping.
        let zero = vec![0u8; 64];
        assert_eq!(drain_records(&zero, 0, 16, &mut scratch, |_| panic!()), 16);
    }
}
