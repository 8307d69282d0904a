//! What the benches share: medians with their range, and backlog sizes timed in turns.
//!
//! On a shared machine a neighbour's burst lasts milliseconds to seconds. Sizes timed one after
//! another (or round by round) each meet different bursts, and their ratio measures the
//! neighbours; sizes timed in turns, one sweep of each before the next, meet the same ones, so
//! the ratio of each turn's pair is the backlog's own effect. [`Turns`] keeps those times.

/// The median of `values` (sorted in place); NaN when empty.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// A figure over repeated rounds: the median and the range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median of the rounds.
    pub median: f64,
    /// The lowest round.
    pub low: f64,
    /// The highest round.
    pub high: f64,
}

impl Spread {
    /// The median and range of `values`; NaNs when empty.
    pub fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        Spread {
            median: median(&mut sorted),
            low: sorted.first().copied().unwrap_or(f64::NAN),
            high: sorted.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Times of several sizes taken in turns: turn `t` times each size once, starting from a
/// different size each turn ([`Turns::order`]) so no size always runs first after a pause.
#[derive(Debug, Clone)]
pub struct Turns {
    times: Vec<Vec<f64>>,
}

impl Turns {
    /// No times yet for `sizes` sizes; size 0 is the baseline of the ratios.
    pub fn new(sizes: usize) -> Self {
        Turns {
            times: vec![Vec::new(); sizes],
        }
    }

    /// The sizes in the order turn `turn` times them.
    pub fn order(&self, turn: usize) -> Vec<usize> {
        let n = self.times.len();
        (0..n).map(|k| (turn + k) % n).collect()
    }

    /// Records one time of `size` in the current turn.
    pub fn push(&mut self, size: usize, time: f64) {
        self.times[size].push(time);
    }

    /// The median time of `size`.
    pub fn median(&self, size: usize) -> f64 {
        median(&mut self.times[size].clone())
    }

    /// The median over turns of `size`'s time over the baseline's in the same turn.
    pub fn paired_ratio(&self, size: usize) -> f64 {
        let mut ratios: Vec<f64> = self.times[size]
            .iter()
            .zip(&self.times[0])
            .map(|(t, base)| t / base)
            .collect();
        median(&mut ratios)
    }
}

/// Prints a store's scale figures: per size, the median sweep over its rounds (`medians`, one
/// per round) and the median paired ratio to the first size (`ratios`), each with its range,
/// and the backlog figure its sweeps reported (`seen`: the count and whether it is exact); then
/// the table of the three sizes and the load average.
pub fn print_scales(
    store: &str,
    sizes: &[u64],
    medians: &[Vec<f64>],
    ratios: &[Vec<f64>],
    seen: &[(usize, bool)],
    turns: usize,
) {
    let rounds = medians.first().map_or(0, Vec::len);
    let mut table = Vec::new();
    for (i, backlog) in sizes.iter().enumerate() {
        let (time, ratio) = (Spread::of(&medians[i]), Spread::of(&ratios[i]));
        println!(
            "  backlog={backlog}: one sweep {:.0} us (median of {rounds} rounds of {turns} turns, \
             range {:.0}–{:.0}), to 1k in the same turn {:.3} ({:.3}–{:.3}), backlog figure {}{}",
            time.median,
            time.low,
            time.high,
            ratio.median,
            ratio.low,
            ratio.high,
            seen[i].0,
            if seen[i].1 { " (exact)" } else { " (at least)" }
        );
        table.push((time.median, ratio.median));
    }
    if let [small, middle, large] = table[..] {
        println!(
            "\n| one {store} sweep, batch 25 | 1k | 100k | 1M | 100k / 1k, 1M / 1k (paired) |\n\
             |---|---|---|---|---|\n| median µs | {:.0} | {:.0} | {:.0} | {:.2}, {:.2} |",
            small.0, middle.0, large.0, middle.1, large.1
        );
    }
    println!(
        "load average at the end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn a_spread_is_the_median_and_the_extremes_of_its_rounds() {
        let s = Spread::of(&[5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.low, s.high), (3.0, 1.0, 5.0));
    }

    #[test]
    fn each_turn_starts_from_the_next_size() {
        let turns = Turns::new(3);
        assert_eq!(turns.order(0), [0, 1, 2]);
        assert_eq!(turns.order(1), [1, 2, 0]);
        assert_eq!(turns.order(5), [2, 0, 1]);
    }

    #[test]
    fn a_paired_ratio_divides_within_each_turn_so_a_slow_turn_cancels_out() {
        let mut turns = Turns::new(2);
        // The second turn is three times slower for both sizes (a neighbour's burst); size 1
        // costs 1.1 times the baseline in every turn.
        for (base, slow) in [(10.0, 1.0), (10.0, 3.0), (10.0, 1.0)] {
            turns.push(0, base * slow);
            turns.push(1, base * slow * 1.1);
        }
        assert!((turns.paired_ratio(1) - 1.1).abs() < 1e-9);
        assert_eq!(turns.paired_ratio(0), 1.0);
        assert_eq!(turns.median(0), 10.0);
    }
}
