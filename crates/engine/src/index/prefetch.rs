//! Cache prefetch hints for the vector paths, which wait on memory more
//! than on arithmetic: a graph walk reads vectors scattered over the arena.

/// Asks the CPU to start loading the cache line at `p` (a hint: it never
/// faults, whatever the address).
#[inline(always)]
pub fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing the program sees.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks the CPU to start loading `v` into cache.
#[inline(always)]
pub fn prefetch(v: &[f32]) {
    let start = v.as_ptr().cast::<u8>();
    for offset in (0..std::mem::size_of_val(v)).step_by(64) {
        line(start.wrapping_add(offset));
    }
}
