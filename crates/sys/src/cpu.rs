//! CPU hints for the hot path: a cache-line prefetch.

/// Asks the CPU to bring the cache line holding `*r` into the caches and
/// returns at once: unlike a load, the hint does not wait for the line and
/// holds no place in the out-of-order window, so a batched lookup can have
/// the lines of many keys in flight before it reads any of them.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    prefetch_address(r as *const T);
}

/// [`prefetch`] of the line holding address `p`, which need not point at
/// anything: the hint reads no memory, so a batched lookup can prefetch an
/// index it computed without first checking it against the array.
#[inline(always)]
pub fn prefetch_address<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it never faults and changes no memory or
    // register, whatever the address (an unmapped one is ignored). SSE is
    // part of the x86-64 baseline, so the instruction exists on every
    // x86-64 CPU.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM is a hint: it never faults, whatever the address, and
    // changes no memory, register or flag (`nostack`, `readonly`,
    // `preserves_flags`).
    unsafe {
        core::arch::asm!("prfm pldl1keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefetch_leaves_memory_as_it_was() {
        let v: Vec<u64> = (0..1024).collect();
        for x in &v {
            super::prefetch(x);
        }
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
    }

    #[test]
    fn prefetch_of_any_address_does_not_fault() {
        let v = [1u32; 4];
        super::prefetch_address(core::ptr::null::<u8>());
        super::prefetch_address(v.as_ptr().wrapping_add(1 << 40));
        super::prefetch_address(v.as_ptr().wrapping_sub(1 << 20));
        assert_eq!(v, [1; 4]);
    }
}
