//! The CNI plugin's allocator: a bump arena for a process that lives about a millisecond.
//!
//! musl's malloc spent about 30 % of a cached ADD's instructions (215 k of 700 k under callgrind) and a
//! `mmap`/`munmap` pair for many of its small groups (54 of the ADD's ~150 system calls). The plugin
//! allocates a few hundred kilobytes and exits, so it needs no reuse: once [`Arena::enable`] runs (the
//! plugin's entry, nothing else), the allocations of the thread that enabled it are carved from a zeroed
//! static region in order, a free gives back only the most recent allocation (a growing buffer stays in
//! place), and everything else is returned to the system when the process exits. Whatever does not fit,
//! everything allocated before `enable` or in another applet (the long-running agent never enables it), and
//! everything another thread allocates (the API lookup's helper thread) goes to the system allocator: the
//! arena's state never passes between threads, so it needs no ordering (plain loads and stores).
//! The region is `.bss`: it costs no file size, and a page only when first touched.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes the arena hands out before falling back to the system allocator. An ADD uses a few hundred KiB; a
/// pod object from the API path at the JSON size limit fits too.
pub const SIZE: usize = 8 << 20;

#[repr(C, align(4096))]
struct Region<const N: usize>(UnsafeCell<[u8; N]>);

std::thread_local! {
    /// One byte per thread whose address names the thread (see [`Arena::owner`]); const-initialised and
    /// without a destructor, so reading its address never allocates, registers or fails.
    static THREAD: u8 = const { 0 };
}

/// A token naming the calling thread: the address of its [`THREAD`] byte, distinct for every live thread and
/// never 0. A thread that has exited may see its token reused by a later one; the arena's owner is the
/// plugin's main thread, which lives as long as the process.
fn this_thread() -> usize {
    THREAD.with(|t| t as *const u8 as usize)
}

pub struct Arena<const N: usize> {
    /// The thread the arena serves ([`this_thread`]), 0 until [`Arena::enable`]. Only that thread claims,
    /// gives back or grows blocks, so `next`, `high` and the region's reuse never pass between threads: every
    /// other thread (the plugin's API lookup runs on a helper that can outlive its deadline) gets the system
    /// allocator, and frees an arena block it was handed by leaving it in place.
    owner: AtomicUsize,
    /// Offset of the first free byte of `mem`. Written by the owner only.
    next: AtomicUsize,
    /// Offset past the furthest byte ever handed out: beyond it `mem` is still the zeroed `.bss`, so a
    /// zeroed block there needs no writing (and touches no page: a 64 KiB receive buffer costs nothing
    /// until the kernel fills part of it). Written by the owner only.
    high: AtomicUsize,
    mem: Region<N>,
}

// SAFETY: `mem` is only written through pointers handed out by `alloc`, and every byte range is handed to
// one caller at a time: only the owner thread claims ranges, gives them back (the rollback in `dealloc`) and
// hands them out again, all in its own program order, so a range is reused only after its previous use on
// that same thread ended. A block the owner passes to another thread goes with whatever synchronisation the
// passing itself has (a channel, a join), as with any allocator; that thread never returns it for reuse.
unsafe impl<const N: usize> Sync for Arena<N> {}

impl<const N: usize> Arena<N> {
    pub const fn new() -> Self {
        Arena {
            owner: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            high: AtomicUsize::new(0),
            mem: Region(UnsafeCell::new([0; N])),
        }
    }

    /// Serves the calling thread's allocations from now on; other threads keep the system allocator. Only
    /// for a short-lived process: nothing but the most recent allocation is ever reused. Called once.
    pub fn enable(&self) {
        self.owner.store(this_thread(), Ordering::Relaxed);
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

    /// Whether the calling thread is the one the arena serves (no thread-local read while it is disabled,
    /// as in every applet but the plugin).
    fn serves_me(&self) -> bool {
        let owner = self.owner.load(Ordering::Relaxed);
        owner != 0 && owner == this_thread()
    }

    /// Claims `size` bytes aligned to `align` for the owner thread (the caller checked), or `None` when they
    /// do not fit.
    fn claim(&self, size: usize, align: usize) -> Option<*mut u8> {
        let base = self.base();
        // `align` is a power of two (Layout's invariant); overflow is checked, and base + N is a real
        // address, so `end` within it cannot wrap.
        let start =
            (base + self.next.load(Ordering::Relaxed)).checked_add(align - 1)? & !(align - 1);
        let end = start.checked_add(size)?;
        if end > base + N {
            return None;
        }
        self.next.store(end - base, Ordering::Relaxed);
        // SAFETY: `start - base` is within the region (checked above), so the pointer stays in `mem` and
        // keeps its provenance.
        Some(unsafe { self.mem.0.get().cast::<u8>().add(start - base) })
    }

    /// Raises the high-water mark to `end` (an offset); returns the mark before.
    fn raise_high(&self, end: usize) -> usize {
        let old = self.high.load(Ordering::Relaxed);
        if end > old {
            self.high.store(end, Ordering::Relaxed);
        }
        old
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
        if self.serves_me() {
            if let Some(p) = self.claim(layout.size(), layout.align()) {
                self.raise_high(p as usize - self.base() + layout.size());
                return p;
            }
        }
        // SAFETY: the caller's contract (non-zero size) is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if self.serves_me() {
            if let Some(p) = self.claim(layout.size(), layout.align()) {
                let start = p as usize - self.base();
                // Bytes below the old high-water mark may have been handed out before (and given back):
                // zero those; the rest is untouched `.bss`.
                let old = self.raise_high(start + layout.size());
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
        // The owner's most recent block is given back; any other block, and any block another thread
        // frees, stays until exit.
        let start = ptr as usize - self.base();
        if self.serves_me() && self.next.load(Ordering::Relaxed) == start + layout.size() {
            self.next.store(start, Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !self.owns(ptr) {
            // SAFETY: the system allocator's block, with the caller's layout and size.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        let start = ptr as usize - self.base();
        // The owner's most recent block grows or shrinks in place when it fits.
        if let Some(end) = start.checked_add(new_size).filter(|&e| e <= N) {
            if self.serves_me() && self.next.load(Ordering::Relaxed) == start + layout.size() {
                self.next.store(end, Ordering::Relaxed);
                // The owner may write up to `end`: past the old mark the region is no longer zero.
                self.raise_high(end);
                return ptr;
            }
        }
        // SAFETY: `new_size` with the old alignment is a valid layout (the caller's contract); the copy
        // covers bytes both blocks own, and the blocks do not overlap (the new one was just claimed, or is
        // the system's).
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
