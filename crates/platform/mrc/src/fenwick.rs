//! A Fenwick (binary indexed) tree of counts: point update and prefix sum in
//! O(log n).

/// Counts at positions `0..len`.
#[derive(Clone, Debug, Default)]
pub struct Fenwick {
    t: Vec<u32>,
}

impl Fenwick {
    /// `len` positions, all zero.
    pub fn new(len: usize) -> Self {
        Fenwick { t: vec![0; len] }
    }

    /// Number of positions.
    pub fn len(&self) -> usize {
        self.t.len()
    }

    /// Whether there are no positions.
    pub fn is_empty(&self) -> bool {
        self.t.is_empty()
    }

    /// Add `d` (+1 or -1) at position `i`.
    pub fn add(&mut self, i: usize, d: i32) {
        let mut i = i + 1;
        while i <= self.t.len() {
            self.t[i - 1] = self.t[i - 1].wrapping_add_signed(d);
            i += i & i.wrapping_neg();
        }
    }

    /// Sum of positions `0..=i`.
    pub fn prefix(&self, i: usize) -> u64 {
        let mut i = (i + 1).min(self.t.len());
        let mut s = 0u64;
        while i > 0 {
            s += u64::from(self.t[i - 1]);
            i -= i & i.wrapping_neg();
        }
        s
    }

    /// Build from 0/1 flags in O(n).
    pub fn from_flags(flags: impl Iterator<Item = bool>, len: usize) -> Self {
        let mut t = vec![0u32; len];
        for (i, f) in flags.enumerate() {
            t[i] = u32::from(f);
        }
        for i in 1..=len {
            let j = i + (i & i.wrapping_neg());
            if j <= len {
                t[j - 1] += t[i - 1];
            }
        }
        Fenwick { t }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_sums_match_a_plain_array() {
        let mut f = Fenwick::new(37);
        let mut a = [0i64; 37];
        for k in 0..200usize {
            let i = (k * 7919) % 37;
            let d = if a[i] > 0 && k % 3 == 0 { -1 } else { 1 };
            f.add(i, d);
            a[i] += i64::from(d);
            for j in 0..37 {
                assert_eq!(f.prefix(j) as i64, a[..=j].iter().sum::<i64>());
            }
        }
        let g = Fenwick::from_flags(a.iter().map(|&x| x > 0), 37);
        for j in 0..37 {
            assert_eq!(
                g.prefix(j) as i64,
                a[..=j].iter().filter(|&&x| x > 0).count() as i64
            );
        }
    }
}
