import pickle

import numpy as np
from hdrh.histogram import HdrHistogram

from storebench.measure.metrics import HIGHEST_NS, LOWEST_NS, SIGNIFICANT_FIGURES, Histogram


def test_vectorised_recording_fills_the_same_buckets_as_hdrh():
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [rng.integers(1, 3000, 5000), rng.lognormal(12, 2, 20000).astype(np.int64) + 1]
    )
    ours = Histogram()
    ours.record(values)
    ref = HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_FIGURES)
    for v in values.tolist():
        ref.record_value(v)
    np.testing.assert_array_equal(ours._counts, np.ctypeslib.as_array(ref.counts))
    for p in (0.1, 50, 90, 99, 99.9, 100):
        assert ours.percentile(p) == ref.get_value_at_percentile(p)
    assert ours.hdr.min_value == ref.min_value and ours.hdr.max_value == ref.max_value


def test_merging_client_histograms_equals_the_histogram_of_the_union():
    rng = np.random.default_rng(4)
    parts = [rng.lognormal(10 + c, 1.0, 10_000 * (c + 1)).astype(np.int64) + 1 for c in range(4)]
    merged = Histogram()
    for part in parts:
        h = Histogram()
        h.record(part)
        merged.merge(pickle.loads(pickle.dumps(h)))  # as process clients send them
    union = Histogram()
    union.record(np.concatenate(parts))
    assert merged.summary() == union.summary()
    np.testing.assert_array_equal(merged._counts, union._counts)
    # and the union's percentiles are the true ones within HDR resolution (0.1%)
    for p in (50, 95, 99, 99.9):
        true = np.percentile(np.concatenate(parts), p, method="inverted_cdf")
        assert abs(merged.percentile(p) - true) <= true * 1e-3 + 1


def test_mean_is_exact_and_out_of_range_values_are_clamped_and_counted():
    h = Histogram()
    h.record(np.array([100, 200, 300, HIGHEST_NS * 2]))
    assert h.clamped == 1
    assert h.count == 4
    h2 = Histogram()
    h2.record(np.array([1, 2, 3, 4], np.int64))
    assert h2.summary()["mean"] == 2.5


def test_encoded_form_round_trips():
    h = Histogram()
    h.record(np.arange(1, 10_000))
    back = Histogram.decode(h.encode())
    assert back.count == h.count
    assert back.percentile(99) == h.percentile(99)
