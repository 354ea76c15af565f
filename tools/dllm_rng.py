"""Python twin of src/decode/rng.{h,cpp}: Philox4x32-10 counter-based uniforms.

uniform(seed, sequence, step, position, stream) returns the same double as the C++ engine, so a
reference implementation given these draws reproduces the engine's sampled trajectories exactly.
"""
M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF

STREAM_TOKEN_SAMPLE = 0
STREAM_ACCEPT = 1
STREAM_REMASK = 2


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


def uniform(seed, sequence, step, position, stream=STREAM_TOKEN_SAMPLE):
    r = philox4x32([position & MASK32, step & MASK32, sequence & MASK32, stream & MASK32],
                   [seed & MASK32, (seed >> 32) & MASK32])
    return ((r[0] >> 5) * 67108864.0 + (r[1] >> 6)) * (1.0 / 9007199254740992.0)


if __name__ == "__main__":
    # Known-answer values checked by tests/decode/rng_test.cpp.
    for args in [(0, 0, 0, 0), (42, 0, 3, 17), (2**40 + 5, 7, 123456, 99, 1)]:
        print(args, repr(uniform(*args)))
