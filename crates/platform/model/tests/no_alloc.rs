//! The simulator calls `submit` tens of millions of times: it must not
//! allocate. A counting allocator checks that on this thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use tiercache_model::{DeviceModel, IoKind, ModelOp, Profile};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn submit_does_not_allocate() {
    let p = Profile::default();
    let mut models: Vec<Box<dyn DeviceModel>> = vec![
        Box::new(p.hdd_model().unwrap()),
        Box::new(p.ssd_model().unwrap()),
        Box::new(p.dram_model().unwrap()),
    ];
    let kinds = [IoKind::Read, IoKind::Write, IoKind::Trim, IoKind::Flush];
    let before = ALLOCS.with(|c| c.get());
    let mut now = 0u64;
    let mut sink = 0u64;
    for i in 0..20_000u64 {
        let op = ModelOp::new(
            kinds[(i % 7 % 4) as usize],
            i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % (400 << 30),
            4096 << (i % 6),
        );
        for m in models.iter_mut() {
            sink = sink.wrapping_add(m.submit(now, &op));
        }
        now += 50_000;
    }
    let after = ALLOCS.with(|c| c.get());
    assert!(sink > 0);
    // The counter does see allocations on this thread.
    let probe: Vec<u64> = Vec::with_capacity(std::hint::black_box(16));
    assert!(ALLOCS.with(|c| c.get()) > after && probe.capacity() >= 16);
    assert_eq!(
        after - before,
        0,
        "submit allocated {} times",
        after - before
    );
}
