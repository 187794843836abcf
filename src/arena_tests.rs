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

#[test]
fn concurrent_claims_never_overlap() {
    let a: &'static Arena<N> = Box::leak(arena());
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut got = Vec::new();
                for _ in 0..200 {
                    let p = unsafe { a.alloc(layout(24, 8)) };
                    if a.owns(p) {
                        unsafe { std::ptr::write_bytes(p, t, 24) };
                    }
                    got.push(p as usize);
                }
                // Every block still holds this thread's bytes: nobody else was handed it.
                for &p in &got {
                    if a.owns(p as *mut u8) {
                        let s = unsafe { std::slice::from_raw_parts(p as *const u8, 24) };
                        assert!(s.iter().all(|&b| b == t));
                    }
                }
                got
            })
        })
        .collect();
    let mut all: Vec<usize> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n);
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
