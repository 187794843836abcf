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

/// Whether the `n` bytes at `p` are all `v`; `p` is always a block the test holds, of at least `n` bytes.
fn holds(p: *mut u8, n: usize, v: u8) -> bool {
    unsafe { std::slice::from_raw_parts(p, n) }
        .iter()
        .all(|&b| b == v)
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
    assert!(holds(again, 96, 0));
    // Fresh space is zero without being written.
    let fresh = unsafe { a.alloc_zeroed(layout(4096, 8)) };
    assert!(holds(fresh, 4096, 0));
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
    assert!(holds(moved, 16, 7));
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
    assert!(holds(s, 32, 3));
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

/// One thread's share of the churn below: zeroed blocks that it fills with `t`, grows and shrinks (in place
/// while they are the most recent block) and frees, checking its bytes at every step.
fn churn(a: &Arena<N>, t: u8, rounds: usize) {
    for i in 0..rounds {
        let l = layout(24 + i % 40, 8);
        let p = unsafe { a.alloc_zeroed(l) };
        assert!(!p.is_null());
        assert!(holds(p, l.size(), 0), "a zeroed block held another's bytes");
        unsafe { std::ptr::write_bytes(p, t, l.size()) };
        std::thread::yield_now();
        let big = layout(2 * l.size(), 8);
        let g = unsafe { a.realloc(p, l, big.size()) };
        assert!(holds(g, l.size(), t), "a grown block lost its bytes");
        unsafe { std::ptr::write_bytes(g, t, big.size()) };
        std::thread::yield_now();
        let small = layout(l.size() / 2, 8);
        let s = unsafe { a.realloc(g, big, small.size()) };
        assert!(holds(s, small.size(), t), "a shrunk block lost its bytes");
        unsafe { a.dealloc(s, small) };
    }
}

/// Threads allocating, growing, shrinking and freeing at once (the plugin's API lookup runs on a helper
/// thread): every block holds its owner's bytes until given back, and a zeroed block is zero. Under Miri
/// (scripts/test.d/miri) this is also the data-race check: bytes one thread gives back and another claims
/// or grows into without the hand-over ordering their accesses are reported there.
#[test]
fn threads_allocating_and_freeing_at_once_never_share_a_block() {
    let a = &*arena();
    let rounds = if cfg!(miri) { 40 } else { 300 };
    std::thread::scope(|s| {
        for t in 1..=3u8 {
            s.spawn(move || churn(a, t, rounds));
        }
        churn(a, 0xee, rounds);
    });
}

/// Bytes one thread gives back and another takes, in each of the arena's three ways, with the two threads
/// sequenced by a `Relaxed` counter (which orders no other memory; read with read-modify-writes, which always
/// see the latest value, so that Miri's weak-memory emulation cannot keep a waiting thread on a stale one):
/// only the arena's own hand-over orders the giver's writes before the taker's accesses. Natively: the bytes are reused where expected and come back
/// zeroed or with their new owner's contents; under Miri (scripts/test.d/miri) a hand-over without its
/// Release/Acquire pair is reported here as a data race, deterministically.
#[test]
fn bytes_given_back_on_one_thread_are_taken_safely_on_another() {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let a = &*arena();
    let step = AtomicUsize::new(0);
    let given = AtomicUsize::new(0); // where the helper's bytes were
    let wait = |n| {
        while step.fetch_add(0, Relaxed) < n {
            std::thread::yield_now();
        }
    };
    // Should the main side fail an assertion, the helper must not wait for it forever (scope joins it).
    struct Unblock<'a>(&'a AtomicUsize);
    impl Drop for Unblock<'_> {
        fn drop(&mut self) {
            self.0.store(usize::MAX, Relaxed);
        }
    }
    std::thread::scope(|s| {
        let _unblock = Unblock(&step);
        s.spawn(|| {
            // 1. freed here, claimed there.
            let y = unsafe { a.alloc(layout(64, 8)) };
            unsafe { std::ptr::write_bytes(y, 0xaa, 64) };
            unsafe { a.dealloc(y, layout(64, 8)) };
            given.store(y as usize, Relaxed);
            step.store(1, Relaxed);
            // 2. freed here, grown into there.
            wait(2);
            let y = unsafe { a.alloc(layout(32, 8)) };
            unsafe { std::ptr::write_bytes(y, 0xbb, 32) };
            unsafe { a.dealloc(y, layout(32, 8)) };
            given.store(y as usize, Relaxed);
            step.store(3, Relaxed);
            // 3. shrunk here, claimed there.
            wait(4);
            let w = unsafe { a.alloc(layout(128, 8)) };
            unsafe { std::ptr::write_bytes(w, 0xdd, 128) };
            let w = unsafe { a.realloc(w, layout(128, 8), 32) };
            given.store(w as usize + 32, Relaxed);
            step.store(5, Relaxed);
        });
        wait(1);
        let z = unsafe { a.alloc_zeroed(layout(64, 8)) };
        assert_eq!(
            z as usize,
            given.fetch_add(0, Relaxed),
            "the freed bytes were not reused"
        );
        assert!(holds(z, 64, 0), "claimed bytes were not zeroed");
        let x = unsafe { a.alloc(layout(32, 8)) };
        step.store(2, Relaxed);
        wait(3);
        assert_eq!(x as usize + 32, given.fetch_add(0, Relaxed));
        let g = unsafe { a.realloc(x, layout(32, 8), 64) };
        assert_eq!(g, x, "the most recent block did not grow in place");
        unsafe { std::ptr::write_bytes(g, 0xcc, 64) };
        step.store(4, Relaxed);
        wait(5);
        let v = unsafe { a.alloc_zeroed(layout(64, 8)) };
        assert_eq!(
            v as usize,
            given.fetch_add(0, Relaxed),
            "the bytes a shrink gave back were not reused"
        );
        assert!(
            holds(v, 64, 0),
            "bytes given back by a shrink were not zeroed"
        );
    });
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
    assert!(holds(z, 4096, 0));
}
