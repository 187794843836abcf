use super::*;

const N: usize = 64 << 10;

fn arena() -> Box<Arena<N>> {
    let a = Box::new(Arena::<N>::new());
    a.enable();
    a
}

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

/// A block's pointer, sent to another thread as a block handed over is.
struct Block(*mut u8);
// SAFETY: test-only; the receiving thread is the block's only user from then on.
unsafe impl Send for Block {}

impl Block {
    /// The pointer, taken out of a moved `Block` (a closure that names only the field would capture the bare
    /// pointer, which is not `Send`).
    fn get(self) -> *mut u8 {
        self.0
    }
}

#[test]
fn blocks_are_aligned_disjoint_and_inside_the_region() {
    let a = arena();
    let mut blocks = Vec::new();
    for (i, align) in [1usize, 8, 16, 64, 4096, 2, 32].into_iter().enumerate() {
        let l = layout(100 + i, align);
        let p = unsafe { a.alloc(l) };
        assert!(a.owns(p));
        assert_eq!(p as usize % align, 0);
        unsafe { std::ptr::write_bytes(p, i as u8, l.size()) };
        blocks.push((p, l, i as u8));
    }
    // Writing one block never touched another.
    for (p, l, v) in &blocks {
        let s = unsafe { std::slice::from_raw_parts(*p, l.size()) };
        assert!(s.iter().all(|b| b == v));
    }
    assert!(a.used() <= N);
}

#[test]
fn only_the_most_recent_block_is_given_back() {
    let a = arena();
    let first = unsafe { a.alloc(layout(64, 8)) };
    let second = unsafe { a.alloc(layout(64, 8)) };
    let used = a.used();
    unsafe { a.dealloc(first, layout(64, 8)) };
    assert_eq!(a.used(), used, "an older block stays");
    unsafe { a.dealloc(second, layout(64, 8)) };
    assert_eq!(a.used(), used - 64);
    // The space is handed out again, and zeroed when asked, also where it reaches past what was used.
    unsafe { std::ptr::write_bytes(second, 0xff, 64) };
    let again = unsafe { a.alloc_zeroed(layout(96, 8)) };
    assert_eq!(again, second);
    assert!(unsafe { std::slice::from_raw_parts(again, 96) }
        .iter()
        .all(|&b| b == 0));
    // Fresh space is zero without being written.
    let fresh = unsafe { a.alloc_zeroed(layout(4096, 8)) };
    assert!(unsafe { std::slice::from_raw_parts(fresh, 4096) }
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn the_most_recent_block_grows_in_place_and_others_move_with_their_bytes() {
    let a = arena();
    let p = unsafe { a.alloc(layout(16, 8)) };
    unsafe { std::ptr::write_bytes(p, 7, 16) };
    let grown = unsafe { a.realloc(p, layout(16, 8), 4000) };
    assert_eq!(grown, p, "last block grows in place");
    let other = unsafe { a.alloc(layout(8, 8)) };
    let moved = unsafe { a.realloc(grown, layout(4000, 8), 8000) };
    assert_ne!(moved, grown);
    assert!(moved as usize > other as usize);
    assert!(unsafe { std::slice::from_raw_parts(moved, 16) }
        .iter()
        .all(|&b| b == 7));
}

#[test]
fn what_does_not_fit_comes_from_the_system_and_goes_back_there() {
    let a = arena();
    let big = layout(N + 1, 8);
    let p = unsafe { a.alloc(big) };
    assert!(!p.is_null());
    assert!(!a.owns(p));
    unsafe { std::ptr::write_bytes(p, 1, big.size()) };
    let q = unsafe { a.realloc(p, big, 2 * N) };
    assert!(!a.owns(q));
    unsafe { a.dealloc(q, layout(2 * N, 8)) };
    // An arena block that outgrows the region moves to the system allocator with its bytes.
    let r = unsafe { a.alloc(layout(32, 8)) };
    unsafe { std::ptr::write_bytes(r, 3, 32) };
    let s = unsafe { a.realloc(r, layout(32, 8), N * 2) };
    assert!(!a.owns(s));
    assert!(unsafe { std::slice::from_raw_parts(s, 32) }
        .iter()
        .all(|&b| b == 3));
    unsafe { a.dealloc(s, layout(N * 2, 8)) };
}

#[test]
fn a_disabled_arena_hands_out_nothing_of_its_own() {
    let a = Box::new(Arena::<N>::new());
    let p = unsafe { a.alloc(layout(64, 8)) };
    assert!(!a.owns(p));
    assert_eq!(a.used(), 0);
    unsafe { a.dealloc(p, layout(64, 8)) };
}

/// Threads allocating, writing and freeing at once (the plugin's API lookup runs on a helper thread): every
/// block holds its owner's bytes until freed, and blocks alive at the same time never overlap. Under Miri
/// (scripts/test.d/miri) this is also the data-race check: an arena whose blocks pass from one thread's free
/// to another thread's claim without ordering is reported there.
#[test]
fn threads_allocating_and_freeing_at_once_never_share_a_block() {
    let a = &*arena();
    let rounds = if cfg!(miri) { 40 } else { 2000 };
    std::thread::scope(|s| {
        for t in 1..=3u8 {
            s.spawn(move || {
                for i in 0..rounds {
                    let l = layout(24 + i % 40, 8);
                    let p = unsafe { a.alloc_zeroed(l) };
                    assert!(!p.is_null());
                    assert!(unsafe { std::slice::from_raw_parts(p, l.size()) }
                        .iter()
                        .all(|&b| b == 0));
                    unsafe { std::ptr::write_bytes(p, t, l.size()) };
                    std::thread::yield_now();
                    assert!(unsafe { std::slice::from_raw_parts(p, l.size()) }
                        .iter()
                        .all(|&b| b == t));
                    unsafe { a.dealloc(p, l) };
                }
            });
        }
        // The owner thread does the same meanwhile.
        for i in 0..rounds {
            let l = layout(24 + i % 40, 8);
            let p = unsafe { a.alloc_zeroed(l) };
            assert!(unsafe { std::slice::from_raw_parts(p, l.size()) }
                .iter()
                .all(|&b| b == 0));
            unsafe { std::ptr::write_bytes(p, 0xee, l.size()) };
            std::thread::yield_now();
            assert!(unsafe { std::slice::from_raw_parts(p, l.size()) }
                .iter()
                .all(|&b| b == 0xee));
            unsafe { a.dealloc(p, l) };
        }
    });
}

/// Only the thread that enabled the arena is served from it; every other thread gets the system allocator,
/// and the arena's accounting never moves for them.
#[test]
fn other_threads_are_served_by_the_system_allocator() {
    let a = &*arena();
    let mine = unsafe { a.alloc(layout(64, 8)) };
    assert!(a.owns(mine));
    let used = a.used();
    std::thread::scope(|s| {
        s.spawn(move || {
            for l in [layout(64, 8), layout(4096, 64)] {
                let p = unsafe { a.alloc(l) };
                assert!(!a.owns(p), "a helper thread was handed arena memory");
                let z = unsafe { a.alloc_zeroed(l) };
                assert!(!a.owns(z));
                let g = unsafe { a.realloc(p, l, 2 * l.size()) };
                assert!(!a.owns(g));
                unsafe { a.dealloc(g, layout(2 * l.size(), l.align())) };
                unsafe { a.dealloc(z, l) };
            }
        });
    });
    assert_eq!(a.used(), used);
    unsafe { a.dealloc(mine, layout(64, 8)) };
    assert_eq!(a.used(), used - 64);
}

/// A block the owner hands to another thread (a reply buffer, a pod object) and that thread frees, grows or
/// shrinks is never given back to the arena: the owner could otherwise claim the bytes again while nothing
/// orders the other thread's last writes before its own.
#[test]
fn a_block_freed_by_another_thread_is_never_handed_out_again() {
    let a = &*arena();
    let p = unsafe { a.alloc(layout(256, 8)) };
    unsafe { std::ptr::write_bytes(p, 5, 256) };
    let used = a.used();
    let block = Block(p);
    let grown = std::thread::scope(|s| {
        s.spawn(move || {
            let p = block.get();
            assert!(unsafe { std::slice::from_raw_parts(p, 256) }
                .iter()
                .all(|&b| b == 5));
            unsafe { std::ptr::write_bytes(p, 6, 256) };
            // Grown by the other thread: it moves to the system allocator with its bytes.
            let g = unsafe { a.realloc(p, layout(256, 8), 512) };
            assert!(!a.owns(g));
            assert!(unsafe { std::slice::from_raw_parts(g, 256) }
                .iter()
                .all(|&b| b == 6));
            Block(g)
        })
        .join()
        .unwrap()
    });
    assert_eq!(
        a.used(),
        used,
        "the block the other thread let go was given back"
    );
    let next = unsafe { a.alloc(layout(256, 8)) };
    assert_ne!(next, p);
    unsafe { a.dealloc(grown.get(), layout(512, 8)) };
    // And plainly freed by another thread: stays where it is.
    let q = Block(unsafe { a.alloc(layout(128, 8)) });
    let used = a.used();
    std::thread::scope(|s| {
        s.spawn(move || unsafe { a.dealloc(q.get(), layout(128, 8)) });
    });
    assert_eq!(a.used(), used);
}

#[test]
fn a_block_grown_in_place_then_freed_comes_back_zeroed() {
    let a = arena();
    let p = unsafe { a.alloc(layout(16, 8)) };
    let grown = unsafe { a.realloc(p, layout(16, 8), 4096) };
    assert_eq!(grown, p);
    unsafe { std::ptr::write_bytes(grown, 0xab, 4096) };
    unsafe { a.dealloc(grown, layout(4096, 8)) };
    let z = unsafe { a.alloc_zeroed(layout(4096, 8)) };
    assert_eq!(z, p);
    assert!(unsafe { std::slice::from_raw_parts(z, 4096) }
        .iter()
        .all(|&b| b == 0));
}
