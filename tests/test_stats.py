"""fedray.stats: intervals over seeds and paired comparisons, on values worked by hand."""

import math

import pytest

from fedray.stats import interval, paired


def test_interval_is_students_t_over_the_values():
    i = interval([1.0, 2.0, 3.0])  # mean 2, sd 1, t(0.975, 2) = 4.302653
    assert (i.n, i.mean) == (3, 2.0)
    assert i.half_width == pytest.approx(4.302652729749464 / math.sqrt(3), rel=1e-12)
    assert i.low == pytest.approx(2 - 2.4841377, abs=1e-6) and i.high == pytest.approx(2 + 2.4841377, abs=1e-6)
    assert i.text() == "2.0 [-0.5, 4.5]"
    five = interval([10, 12, 11, 13, 9])  # sd 1.5811, t(0.975, 4) = 2.776445
    assert five.half_width == pytest.approx(2.776445105 * 1.5811388 / math.sqrt(5), rel=1e-6)
    one = interval([81.9])
    assert one.n == 1 and math.isnan(one.low) and one.text() == "81.9 (one seed)"
    with pytest.raises(ValueError, match="at least one value"):
        interval([])


def test_paired_pairs_by_seed_and_words_the_verdict_by_the_interval():
    # MrTF against FedDF in one scene: below in every seed, by 2.2 / 1.7 / 2.8 -> reversed
    p = paired({0: 81.9, 1: 82.3, 2: 81.5}, {0: 84.1, 1: 84.0, 2: 84.3})
    assert p.seeds == (0, 1, 2) and (p.wins, p.losses) == (0, 3)
    assert p.difference.mean == pytest.approx(-2.2333333, abs=1e-6)
    assert p.difference.high < 0 and p.verdict == "reversed"
    # ahead in 2 of 3 seeds, but the interval holds zero -> not shown
    q = paired({0: 75.0, 1: 74.0, 2: 71.0}, {0: 74.0, 1: 73.5, 2: 73.0})
    assert (q.wins, q.losses) == (2, 1) and q.difference.low < 0 < q.difference.high and q.verdict == "not shown"
    # ahead by a steady margin -> holds; only the shared seeds count
    r = paired({0: 50.0, 1: 51.0, 2: 52.0, 9: 0.0}, {0: 47.0, 1: 48.5, 2: 48.8})
    assert r.seeds == (0, 1, 2) and r.difference.low > 0 and r.verdict == "holds"
    assert paired({0: 80.4}, {0: 80.9}).verdict == "one seed"
    with pytest.raises(ValueError, match=r"no seed in common: A ran \[1\], B ran \[0\]"):
        paired({1: 1.0}, {0: 1.0})


def test_bonferroni_spreads_the_family_level_over_its_claims():
    from fedray.stats import bonferroni

    assert bonferroni(1) == pytest.approx(0.95, abs=1e-15) and bonferroni(10) == pytest.approx(0.995, abs=1e-15)
    assert bonferroni(48) == pytest.approx(1 - 0.05 / 48, abs=1e-15)
    with pytest.raises(ValueError, match="at least one claim"):
        bonferroni(0)
    # five seeds: t(1 - 0.0025, 4) = 5.59757 (tables: t_{0.9975, 4}); the corrected interval is wider
    values = [10, 12, 11, 13, 9]
    ten = interval(values, bonferroni(10))
    assert ten.half_width == pytest.approx(5.597568 * 1.5811388 / math.sqrt(5), rel=1e-5)
    # a difference that holds alone (2.1 [0.6, 3.6]) is not shown in a family of ten
    p = paired({s: 2.0 + d for s, d in enumerate([0, 1, -1, 2, -2])}, {s: 0.0 for s in range(5)})
    assert p.verdict == "holds"
    q = paired({s: 2.0 + d for s, d in enumerate([0, 1, -1, 2, -2])}, {s: 0.0 for s in range(5)}, bonferroni(10))
    assert q.difference.low < 0 and q.verdict == "not shown"
