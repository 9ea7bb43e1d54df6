"""tapegrad.testing.reference: the references take arguments as the ops do."""

import numpy as np

from tapegrad.testing.reference import ref_pool


def test_ref_pool_takes_ints_pairs_and_four_sides():
    x = np.random.default_rng(0).normal(size=(1, 2, 5, 6))
    full = ref_pool(x, (3, 3), (2, 2), (1, 1, 1, 1), True, "avg")
    for k, s, pad in [(3, 2, 1), ((3, 3), (2, 2), (1, 1)), (3, (2, 2), (1, 1, 1, 1))]:
        out, arg = ref_pool(x, k, s, pad, True, "avg")
        np.testing.assert_array_equal(out, full[0])
        np.testing.assert_array_equal(arg, full[1])
