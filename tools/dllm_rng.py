"""Python twin of src/decode/rng.{h,cpp}: Philox4x32-10 counter-based uniforms.

uniform(seed, sequence, step, position, stream) returns the same double as the C++ engine, so a
reference implementation given these draws reproduces the engine's sampled trajectories exactly.
"""
M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF

STREAM_TOKEN_SAMPLE = 0
STREAM_ACCEPT = 1
STREAM_REMASK = 2
STREAM_GUMBEL = 3  # one draw per vocabulary entry (index = token id): LLaDA's Gumbel-max sampling


def philox4x32(c, k):
    c = list(c)
    k = list(k)
    for _ in range(10):
        p0 = M0 * c[0]
        p1 = M1 * c[2]
        hi0, lo0 = (p0 >> 32) & MASK32, p0 & MASK32
        hi1, lo1 = (p1 >> 32) & MASK32, p1 & MASK32
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
        k = [(k[0] + W0) & MASK32, (k[1] + W1) & MASK32]
    return c


def uniform(seed, sequence, step, position, stream=STREAM_TOKEN_SAMPLE, index=0):
    """The counter is [position, step, sequence, stream | index << 8]; index < 2**24 numbers several
    draws of one (position, stream), e.g. the vocabulary entry for STREAM_GUMBEL."""
    assert 0 <= index < (1 << 24)
    r = philox4x32([position & MASK32, step & MASK32, sequence & MASK32, (stream | (index << 8)) & MASK32],
                   [seed & MASK32, (seed >> 32) & MASK32])
    return ((r[0] >> 5) * 67108864.0 + (r[1] >> 6)) * (1.0 / 9007199254740992.0)


def uniform_array(seed, sequence, step, position, stream, indices):
    """uniform() for many indices at once (numpy, vectorised); returns float64 draws."""
    import numpy as np
    idx = np.asarray(indices, dtype=np.uint64)
    assert idx.size == 0 or int(idx.max()) < (1 << 24)
    m32 = np.uint64(MASK32)
    c0 = np.full(idx.shape, position & MASK32, np.uint64)
    c1 = np.full(idx.shape, step & MASK32, np.uint64)
    c2 = np.full(idx.shape, sequence & MASK32, np.uint64)
    c3 = (np.uint64(stream) | (idx << np.uint64(8))) & m32
    k0, k1 = seed & MASK32, (seed >> 32) & MASK32
    for _ in range(10):
        p0 = np.uint64(M0) * c0
        p1 = np.uint64(M1) * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & m32
        hi1, lo1 = p1 >> np.uint64(32), p1 & m32
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
    return ((c0 >> np.uint64(5)).astype(np.float64) * 67108864.0 + (c1 >> np.uint64(6)).astype(np.float64)) \
        * (1.0 / 9007199254740992.0)


if __name__ == "__main__":
    # Known-answer values checked by tests/decode/rng_test.cpp.
    for args in [(0, 0, 0, 0), (42, 0, 3, 17), (2**40 + 5, 7, 123456, 99, 1), (9, 2, 5, 33, 3, 126347)]:
        print(args, repr(uniform(*args)))
    import numpy as np
    ids = np.arange(0, 5000, 7)
    assert list(uniform_array(9, 2, 5, 33, STREAM_GUMBEL, ids)) == [uniform(9, 2, 5, 33, STREAM_GUMBEL, int(i)) for i in ids]
