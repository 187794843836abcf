//! The CNI plugin's allocator: a bump arena for a process that lives about a millisecond.
//!
//! musl's malloc spent about 30 % of a cached ADD's instructions (215 k of 700 k under callgrind) and a
//! `mmap`/`munmap` pair for many of its small groups (54 of the ADD's ~150 system calls). The plugin
//! allocates a few hundred kilobytes and exits, so it needs no reuse: once [`Arena::enable`] runs (the
//! plugin's entry, nothing else), allocations are carved from a zeroed static region in order, a free
//! gives back only the most recent allocation (a growing buffer stays in place), and everything else is
//! returned to the system when the process exits. Whatever does not fit, and everything allocated before
//! `enable` or in another applet (the long-running agent never enables it), goes to the system allocator.
//!
//! The plugin is not single-threaded (its API lookup runs on a helper thread that can outlive its deadline),
//! so bytes can pass from one thread to another through the arena: a block one thread gives back (a free or
//! an in-place shrink of the most recent block) can be the next block another thread claims or grows into.
//! Every such hand-over is a compare-and-swap on `next`: the giving one is `Release`, the taking one
//! `Acquire`, so the giver's writes to those bytes, and its raising of `high`, happen before the taker's
//! (on x86-64 these are the same instructions as `Relaxed`; see `scripts/test.d/miri`).
//! The region is `.bss`: it costs no file size, and a page only when first touched.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Bytes the arena hands out before falling back to the system allocator. An ADD uses a few hundred KiB; a
/// pod object from the API path at the JSON size limit fits too.
pub const SIZE: usize = 8 << 20;

#[repr(C, align(4096))]
struct Region<const N: usize>(UnsafeCell<[u8; N]>);

pub struct Arena<const N: usize> {
    on: AtomicBool,
    /// Offset of the first free byte of `mem`.
    next: AtomicUsize,
    /// Offset past the furthest byte ever handed out: beyond it `mem` is still the zeroed `.bss`, so a
    /// zeroed block there needs no writing (and touches no page: a 64 KiB receive buffer costs nothing
    /// until the kernel fills part of it).
    high: AtomicUsize,
    mem: Region<N>,
}

// SAFETY: `mem` is only written through pointers handed out by `alloc`, and every byte range is handed to
// one caller at a time: ranges are claimed by compare-and-swap on `next`, so two threads never get
// overlapping ones, and a range is only handed out again after its owner freed it (the rollback in
// `dealloc`, itself a compare-and-swap from that range's end). Giving bytes back is a `Release` swap and
// claiming or growing into them an `Acquire` one, so the previous owner's accesses happen before the next
// owner's: no data race on `mem`, whichever threads they run on.
unsafe impl<const N: usize> Sync for Arena<N> {}

impl<const N: usize> Arena<N> {
    pub const fn new() -> Self {
        Arena {
            on: AtomicBool::new(false),
            next: AtomicUsize::new(0),
            high: AtomicUsize::new(0),
            mem: Region(UnsafeCell::new([0; N])),
        }
    }

    /// Serves this process's allocations from now on. Only for a short-lived process: nothing but the most
    /// recent allocation is ever reused.
    pub fn enable(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    /// Bytes handed out so far.
    pub fn used(&self) -> usize {
        self.next.load(Ordering::Relaxed)
    }

    fn base(&self) -> usize {
        self.mem.0.get() as usize
    }

    fn owns(&self, ptr: *mut u8) -> bool {
        let p = ptr as usize;
        p >= self.base() && p < self.base() + N
    }

    /// Claims `size` bytes aligned to `align`, or `None` when they do not fit.
    fn claim(&self, size: usize, align: usize) -> Option<*mut u8> {
        let base = self.base();
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            // `align` is a power of two (Layout's invariant); overflow is checked, and base + N is a real
            // address, so `end` within it cannot wrap.
            let start = (base + cur).checked_add(align - 1)? & !(align - 1);
            let end = start.checked_add(size)?;
            if end > base + N {
                return None;
            }
            // Acquire: these bytes may be ones another thread gave back (its Release in `dealloc` or
            // `realloc`); its writes and its `high` must be seen before this caller writes or zeroes them.
            match self.next.compare_exchange_weak(
                cur,
                end - base,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                // SAFETY: `start - base` is within the region (checked above): the pointer stays in `mem`
                // and keeps its provenance.
                Ok(_) => return Some(unsafe { self.mem.0.get().cast::<u8>().add(start - base) }),
                Err(now) => cur = now,
            }
        }
    }
}

impl<const N: usize> Default for Arena<N> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `alloc` returns either the system allocator's block or a range of `mem` that is `size` bytes
// long, aligned as asked, inside the region and claimed by no one else (see `Sync` above); `dealloc` and
// `realloc` send a block back to whichever allocator it came from, told apart by address (`owns`).
unsafe impl<const N: usize> GlobalAlloc for Arena<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.on.load(Ordering::Relaxed) {
            if let Some(p) = self.claim(layout.size(), layout.align()) {
                self.high
                    .fetch_max(p as usize - self.base() + layout.size(), Ordering::Relaxed);
                return p;
            }
        }
        // SAFETY: the caller's contract (non-zero size) is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if self.on.load(Ordering::Relaxed) {
            if let Some(p) = self.claim(layout.size(), layout.align()) {
                let start = p as usize - self.base();
                // Bytes below the old high-water mark may have been handed out before (and given back):
                // zero those; the rest is untouched `.bss`. A block is only handed out again after its
                // owner's `alloc` returned (and so raised `high`) and it was freed, and that free's Release
                // is what `claim` acquired: the raise is seen here.
                let old = self
                    .high
                    .fetch_max(start + layout.size(), Ordering::Relaxed);
                let dirty = old.saturating_sub(start).min(layout.size());
                // SAFETY: `p` is `layout.size()` bytes of `mem` claimed for this caller alone.
                unsafe { std::ptr::write_bytes(p, 0, dirty) };
                return p;
            }
        }
        // SAFETY: the caller's contract (non-zero size) is passed on unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !self.owns(ptr) {
            // SAFETY: not ours, so the system allocator's, with the caller's layout.
            unsafe { System.dealloc(ptr, layout) };
            return;
        }
        // The most recent block is given back; any other stays until exit. Release: the next claimant of
        // these bytes, on any thread, sees this owner's writes to them as done.
        let start = ptr as usize - self.base();
        let _ = self.next.compare_exchange(
            start + layout.size(),
            start,
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !self.owns(ptr) {
            // SAFETY: the system allocator's block, with the caller's layout and size.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        let start = ptr as usize - self.base();
        // The most recent block grows or shrinks in place when it fits. Growing takes bytes another thread
        // may have given back (Acquire); shrinking gives bytes back (Release).
        if let Some(end) = start.checked_add(new_size).filter(|&e| e <= N) {
            if self
                .next
                .compare_exchange(
                    start + layout.size(),
                    end,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                // The owner may write up to `end`: past the old mark the region is no longer zero.
                self.high.fetch_max(end, Ordering::Relaxed);
                return ptr;
            }
        }
        // SAFETY: `new_size` with the old alignment is a valid layout (the caller's contract); the copy
        // covers bytes both blocks own, and the blocks do not overlap (the new one was just claimed).
        unsafe {
            let new = self.alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

/// The plugin's arena: the binary installs it as the global allocator (`src/main.rs`), the plugin's entry
/// enables it.
pub static ARENA: Arena<SIZE> = Arena::new();

/// The global allocator handle: [`ARENA`], disabled until the plugin enables it.
pub struct Global;

// SAFETY: delegates every call unchanged to `ARENA`, whose contract is above.
unsafe impl GlobalAlloc for Global {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { ARENA.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { ARENA.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { ARENA.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { ARENA.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
#[path = "arena_tests.rs"]
mod tests;
