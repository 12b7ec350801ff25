"""Random numbers (`randint4x`, `randint`, `rand`, `randn`, `rand4x`, `randn4x`):
Philox4x32 as Triton computes it, checked on every backend against a numpy
Philox that reproduces the published Random123 known-answer vectors. Integer
words and uniforms are bit-identical; normals agree within float tolerance.
The low-memory dropout tutorial is ported at ragged sizes."""

import numpy as np
import pytest

import metile

MASK32 = 0xFFFFFFFF


def philox4x32(counters, key, rounds=10):
    """Philox4x32 (Salmon et al. 2011) on uint32 arrays: four counter words and a
    two-word key; returns the four output words."""
    c0, c1, c2, c3 = [np.asarray(c, dtype=np.uint64) & MASK32 for c in counters]
    k0, k1 = [np.uint64(k & MASK32) for k in key]
    for _ in range(rounds):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & MASK32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & MASK32
        k0 = (k0 + np.uint64(0x9E3779B9)) & np.uint64(MASK32)
        k1 = (k1 + np.uint64(0xBB67AE85)) & np.uint64(MASK32)
    return [np.asarray(c, dtype=np.uint64).astype(np.uint32) for c in (c0, c1, c2, c3)]


def test_reference_philox_matches_the_random123_known_answers():
    # Random123's tests/kat_vectors, the three "philox4x32 10" lines: counter, key, expected.
    vectors = [
        ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
        ([MASK32] * 4, [MASK32, MASK32], [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
        (
            [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
            [0xA4093822, 0x299F31D0],
            [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
        ),
    ]
    for counter, key, expected in vectors:
        got = [int(w[0]) for w in philox4x32([[c] for c in counter], key)]
        assert got == expected, (counter, key)


def seed_key(seed, dtype):
    """Triton's key for a seed of `dtype`: the seed widened to 64 bits (sign-extended
    from a signed type), low word first."""
    wide = int(seed) if dtype != np.uint32 else int(seed) & MASK32
    wide &= (1 << 64) - 1
    return [wide & MASK32, wide >> 32]


def words_ref(seed, offsets, dtype=np.int32, rounds=10):
    counters = np.asarray(offsets, dtype=np.int64).astype(np.uint32)
    zero = np.zeros_like(counters)
    return philox4x32([counters, zero, zero, zero], seed_key(seed, dtype), rounds)


def uniform_ref(word):
    i = word.astype(np.uint32).view(np.int32).astype(np.int64)
    i = np.where(i < 0, -i - 1, i)
    return i.astype(np.float32) * np.float32(4.6566127342e-10)


def normal_ref(u1, u2):
    u1 = np.maximum(np.float32(1e-7), u1).astype(np.float64)
    theta = (np.float32(6.283185307179586) * u2).astype(np.float64)
    r = np.sqrt(-2.0 * np.log(u1))
    return r * np.cos(theta), r * np.sin(theta)


@metile.kernel
def philox_words(O0, O1, O2, O3, seed, base, N, BLOCK: metile.constexpr, ROUNDS: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    a, b, c, d = metile.randint4x(seed, offs + base, ROUNDS)
    metile.store(O0 + offs, a, mask=mask)
    metile.store(O1 + offs, b, mask=mask)
    metile.store(O2 + offs, c, mask=mask)
    metile.store(O3 + offs, d, mask=mask)


@pytest.mark.parametrize("n", [1, 100, 256])
@pytest.mark.parametrize(
    ("seed", "rounds"),
    [(0, 10), (42, 10), (-7, 10), (123456789, 7), (2**31 - 1, 1)],
)
def test_randint4x_matches_philox_bit_for_bit(device, n, seed, rounds):
    base = 1000 if seed else 0
    outs = [np.zeros(n, np.uint32) for _ in range(4)]
    philox_words[(metile.cdiv(n, 64),)](*outs, seed, base, n, BLOCK=64, ROUNDS=rounds)
    expected = words_ref(seed, np.arange(n) + base, rounds=rounds)
    for got, want in zip(outs, expected):
        np.testing.assert_array_equal(got, want)


def test_randint4x_offsets_near_the_i32_limit_wrap_as_u32(device):
    n = 64
    outs = [np.zeros(n, np.uint32) for _ in range(4)]
    base = 2**31 - 32
    philox_words[(1,)](*outs, 5, base, n, BLOCK=64, ROUNDS=10)
    # offs + base wraps past i32::MAX into negative i32 offsets, read as u32 counters.
    expected = words_ref(5, np.arange(n) + base)
    for got, want in zip(outs, expected):
        np.testing.assert_array_equal(got, want)


@metile.kernel
def seeded_words(Out, seed, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.randint(seed, offs), mask=mask)


@pytest.mark.parametrize(
    "seed",
    [np.int64(2**40 + 3), np.int64(-(2**35) - 1), np.uint32(0xFFFFFFF0), np.int32(-2)],
)
def test_seeds_of_every_integer_type_are_widened_as_in_triton(device, seed):
    n = 50
    out = np.zeros(n, np.uint32)
    seeded_words[(1,)](out, seed, n, BLOCK=64)
    np.testing.assert_array_equal(out, words_ref(seed, np.arange(n), dtype=type(seed))[0])


@metile.kernel
def literal_seed_words(Out, N, BLOCK: metile.constexpr, SEED: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.randint(SEED, offs), mask=offs < N)


def test_a_compile_time_seed_may_exceed_32_bits(device):
    n = 40
    out = np.zeros(n, np.uint32)
    seed = 2**33 + 17
    literal_seed_words[(1,)](out, n, BLOCK=64, SEED=seed)
    np.testing.assert_array_equal(out, words_ref(seed, np.arange(n), dtype=np.int64)[0])


@metile.kernel
def uniforms(U, U4, seed, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(U + offs, metile.rand(seed, offs), mask=mask)
    a, b, c, d = metile.rand4x(seed, metile.cast(offs, metile.uint32))
    metile.store(U4 + offs * 4, a, mask=mask)
    metile.store(U4 + offs * 4 + 1, b, mask=mask)
    metile.store(U4 + offs * 4 + 2, c, mask=mask)
    metile.store(U4 + offs * 4 + 3, d, mask=mask)


@pytest.mark.parametrize("n", [3, 200, 1000])
def test_rand_is_bit_identical_to_the_reference(device, n):
    u = np.zeros(n, np.float32)
    u4 = np.zeros(4 * n, np.float32)
    uniforms[(metile.cdiv(n, 128),)](u, u4, 31337, n, BLOCK=128)
    words = words_ref(31337, np.arange(n))
    np.testing.assert_array_equal(u.view(np.uint32), uniform_ref(words[0]).view(np.uint32))
    expected4 = np.stack([uniform_ref(w) for w in words], axis=1).reshape(-1)
    np.testing.assert_array_equal(u4.view(np.uint32), expected4.view(np.uint32))
    assert u.min() >= 0.0 and u.max() < 1.0


def test_uniforms_stay_below_one_at_the_extreme_words():
    # i32::MAX and its folded twin -1 - i32::MIN map to the largest uniform.
    extreme = np.array([0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0], np.uint32)
    u = uniform_ref(extreme)
    assert u.max() < 1.0
    assert u[0] == u[1]


@metile.kernel
def normals(Z, Z4, seed, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Z + offs, metile.randn(seed, offs), mask=mask)
    a, b, c, d = metile.randn4x(seed, offs)
    metile.store(Z4 + offs * 4, a, mask=mask)
    metile.store(Z4 + offs * 4 + 1, b, mask=mask)
    metile.store(Z4 + offs * 4 + 2, c, mask=mask)
    metile.store(Z4 + offs * 4 + 3, d, mask=mask)


@pytest.mark.parametrize("n", [5, 300])
def test_randn_is_box_muller_on_the_first_two_words(device, n):
    z = np.zeros(n, np.float32)
    z4 = np.zeros(4 * n, np.float32)
    normals[(metile.cdiv(n, 128),)](z, z4, 2024, n, BLOCK=128)
    u = [uniform_ref(w) for w in words_ref(2024, np.arange(n))]
    n1, n2 = normal_ref(u[0], u[1])
    n3, n4 = normal_ref(u[2], u[3])
    # log, sqrt, cos and sin differ by ulps between backends (docs/language.md).
    np.testing.assert_allclose(z, n1, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(z4, np.stack([n1, n2, n3, n4], axis=1).reshape(-1), rtol=2e-6, atol=2e-6)


def test_randn_looks_normal(device):
    n = 1 << 14
    z = np.zeros(n, np.float32)
    normals[(n // 128,)](z, np.zeros(4 * n, np.float32), 7, n, BLOCK=128)
    assert abs(z.mean()) < 0.05
    assert abs(z.std() - 1.0) < 0.05


# ----------------------------------------------------------- the dropout tutorial


@metile.kernel
def seeded_dropout(x_ptr, output_ptr, n_elements, p, seed, BLOCK_SIZE: metile.constexpr):
    pid = metile.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + metile.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = metile.load(x_ptr + offsets, mask=mask)
    random = metile.rand(seed, offsets)
    x_keep = random > p
    output = metile.where(x_keep, x / (1 - p), 0.0)
    metile.store(output_ptr + offsets, output, mask=mask)


def dropout(x, p, seed):
    out = np.zeros_like(x)
    n = x.size
    seeded_dropout[(metile.cdiv(n, 1024),)](x, out, n, p, seed, BLOCK_SIZE=1024)
    return out


@pytest.mark.parametrize("n", [10, 1000, 3000])
def test_seeded_dropout_tutorial(device, rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    p = 0.5
    out = dropout(x, p, seed=123)
    keep = uniform_ref(words_ref(123, np.arange(n))[0]) > np.float32(p)
    expected = np.where(keep, x / (np.float32(1) - np.float32(p)), np.float32(0))
    np.testing.assert_array_equal(out, expected)
    # The same seed gives the same mask; another seed another one.
    np.testing.assert_array_equal(dropout(x, p, seed=123), out)
    if n >= 1000:
        assert not np.array_equal(dropout(x, p, seed=512) != 0, out != 0)
        assert abs((out == 0).mean() - p) < 0.06


# ------------------------------------------------------------------- errors


@metile.kernel
def float_seed(Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.rand(1.5, offs))


@metile.kernel
def tile_seed(Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.rand(offs, offs))


@metile.kernel
def float_offsets(Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.rand(3, offs * 1.0))


@metile.kernel
def wide_offsets(Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.rand(3, metile.cast(offs, metile.int64)))


@metile.kernel
def rounds_kernel(Out, BLOCK: metile.constexpr, ROUNDS: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.rand(3, offs, n_rounds=ROUNDS))


@metile.kernel
def traced_rounds(Out, r, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.rand(3, offs, r))


def test_random_argument_errors_name_the_argument_and_line(device):
    out = np.zeros(16, np.float32)
    with pytest.raises(metile.CompilationError, match="rand: the seed must be an integer, got the float 1.5") as e:
        float_seed[(1,)](out, BLOCK=16)
    assert "metile.rand(1.5, offs)" in str(e.value)
    with pytest.raises(metile.CompilationError, match=r"rand: the seed must be an integer scalar, got i32\[16\]"):
        tile_seed[(1,)](out, BLOCK=16)
    with pytest.raises(metile.CompilationError, match=r"rand: the offsets must be i32 or u32 integers \(Philox4x32 "
                       r"counters\), got f32\[16\]"):
        float_offsets[(1,)](out, BLOCK=16)
    with pytest.raises(metile.CompilationError, match=r"got i64\[16\]"):
        wide_offsets[(1,)](out, BLOCK=16)
    with pytest.raises(metile.CompilationError, match="rand's n_rounds must not be negative, got -1"):
        rounds_kernel[(1,)](out, BLOCK=16, ROUNDS=-1)
    with pytest.raises(metile.CompilationError, match="rand: n_rounds must be at most 64, got 65"):
        rounds_kernel[(1,)](out, BLOCK=16, ROUNDS=65)
    with pytest.raises(metile.CompilationError, match="rand's n_rounds must be known when the kernel is compiled"):
        traced_rounds[(1,)](out, 3, BLOCK=16)


def test_zero_rounds_return_the_counter(device):
    out = np.zeros(16, np.float32)
    rounds_kernel[(1,)](out, BLOCK=16, ROUNDS=0)
    np.testing.assert_array_equal(out, uniform_ref(np.arange(16, dtype=np.uint32)))
