// Weight gradient of a 3x3, stride-1, padding-1 convolution on bf16 NHWC
// tensors with Intel AMX tiles (TDPBF16PS: bf16 products summed in fp32).
// Why our own: on a Xeon with AMX, oneDNN's bf16 weight gradient of the net's
// 256->256 convs took 4.2x (7x7) and 7.5x (3x3) the time of the forward of
// the same shape (the same FLOPs), interleaved at batch 1536 (journal
// 2026-11-26-amx-weight-gradient-kernel.md); this kernel 1.4x and 1.6x.
//
// The form: every image gets one zero row below and one zero column to the
// right ((H+1) x (W+1) positions), and the N images follow each other as one
// sequence of rows r. Tap (kh, kw) of the filter then reads the input row
// r + d for output row r, d = (kh-1)(W+1) + (kw-1): a neighbour off the map
// lands on a zero position of this image or of the one before. So
//
//   dW[tap][o][i] = sum_r dY[r][o] * X[r + d][i]
//
// is one GEMM per tap over the same rows, with K running along the rows and
// no im2col copy; the zero positions cost (H+1)(W+1)/(HW) of the products
// (1.31x at 7x7, 1.78x at 3x3). AMX wants one operand (A) with K contiguous,
// so it is transposed, and the other (B) with pairs of K rows interleaved;
// the shift goes onto B, whose rows are whole tile rows: one copy paired
// (2k, 2k+1) serves the even shifts, one paired (2k+1, 2k+2) the odd ones,
// so every tile load starts on a cache line. A is whichever operand has
// fewer channels (the transposing gather costs more a byte than pairing).
//   AT  (chunks of KC rows, A's channels rounded up to 32, KC) bf16,
//       gathered sixteen rows at a time;
//   B   (pair rows with a margin of the largest shift, B's channels rounded
//       up to 32) uint32, twice (even and odd pairing).
// The GEMM: the 32 x 32 (a, b) channel blocks are split between the
// threads; for each chunk of rows, each block of each tap is loaded into
// four tiles, the chunk's K steps accumulate into them, and they go back to
// an fp32 buffer. Every output element is summed in the same order whatever
// the thread count, so the result is deterministic (fp32 sums of exact bf16
// products; the order within one TDPBF16PS is the hardware's).
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "cpu_kernels.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cpuid.h>
#define DBF_AMX_BUILT 1
#define DBF_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))
#else
#define DBF_AMX_BUILT 0
#endif

DBF_NAMESPACE_BEGIN
namespace cpu {

#if DBF_AMX_BUILT
namespace {

constexpr int kChunk = 1024;  // rows of one K chunk: A's 32-channel slab 64 KB, B's 64 KB
constexpr int kTaps = 9;

// The 64-byte tile configuration LDTILECFG reads (palette 1).
struct TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// CPUID leaf 7: AMX-BF16 (EDX bit 22) and AMX-TILE (bit 24); then the Linux
// permission to use the tile state (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA), which oneDNN asks for too; asking twice is harmless.
bool amx_usable() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!((d >> 22) & 1u) || !((d >> 24) & 1u)) return false;
  constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
}

// A workspace aligned to cache lines (tile rows then start on one), grown as
// needed and kept: a fresh one would page-fault in on every call.
template <class T>
struct Buffer {
  T* p = nullptr;
  std::size_t n = 0;
  void reserve(std::size_t want) {
    if (want <= n) return;
    std::free(p);
    p = static_cast<T*>(std::aligned_alloc(64, (want * sizeof(T) + 63) / 64 * 64));
    if (p == nullptr) throw std::bad_alloc();
    n = want;
  }
  T* data() { return p; }
};

// Rows and channel counts of the two operands (A transposed, B paired).
struct Geo {
  int N, H, W, W1, Ca, Cb, Ap, Bp, Mb;
  long P, R, chunks, pair_rows;
  Geo(int n, int h, int w, int ca, int cb) : N(n), H(h), W(w), Ca(ca), Cb(cb) {
    W1 = w + 1;
    P = static_cast<long>(h + 1) * W1;
    R = n * P;
    chunks = (R + kChunk - 1) / kChunk;
    Ap = (ca + 31) / 32 * 32;
    Bp = (cb + 31) / 32 * 32;
    Mb = (w + 2) / 2 + 1;  // pair rows around B's: the largest shift |d| is W + 2 rows
    pair_rows = Mb + chunks * kChunk / 2 + Mb;
  }
  // The source pixel of row r, or -1 at a zero position (or outside the rows).
  long pixel(long r) const {
    if (r < 0 || r >= R) return -1;
    const long n = r / P;
    const long rest = r - n * P;
    const long h = rest / W1, w = rest - h * W1;
    return (h < H && w < W) ? (n * H + h) * W + w : -1;
  }
};

// AT[ch][c][j] = A[row ch*KC + j][c] (Ca channels, bf16 NHWC), zero at
// zero positions and for c >= Ca: sixteen rows at a time, each 32-bit gather
// fetching one (c, c+1) pair of 16 rows.
DBF_AMX_TARGET void pack_transposed(const uint16_t* a, uint16_t* at, const Geo& g) {
  const int pairs = g.Ca / 2, odd = g.Ca & 1;
#pragma omp parallel for schedule(static)
  for (long ch = 0; ch < g.chunks; ++ch) {
    uint16_t* slab = at + ch * g.Ap * kChunk;
    for (long j = 0; j < kChunk / 16; ++j) {
      alignas(64) int idx[16];
      unsigned mask = 0;
      for (int k = 0; k < 16; ++k) {
        const long p = g.pixel(ch * kChunk + j * 16 + k);
        idx[k] = p < 0 ? 0 : static_cast<int>(p * g.Ca);  // in bf16 elements
        if (p >= 0) mask |= 1u << k;
      }
      const __m512i base = _mm512_load_si512(idx);
      const __mmask16 m = static_cast<__mmask16>(mask);
      for (int q = 0; q < pairs; ++q) {  // scale 2: the index counts bf16, the gather reads 32 bits
        const __m512i v = _mm512_mask_i32gather_epi32(
            _mm512_setzero_si512(), m, _mm512_add_epi32(base, _mm512_set1_epi32(2 * q)), a, 2);
        uint16_t* dst = slab + (2L * q) * kChunk + j * 16;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(v));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kChunk),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
      }
      for (int c = 2 * pairs; c < g.Ap; ++c) {  // an odd last channel, then the zero padding
        uint16_t* dst = slab + static_cast<long>(c) * kChunk + j * 16;
        for (int k = 0; k < 16; ++k)
          dst[k] = (odd && c == g.Ca - 1 && (mask >> k & 1u)) ? a[idx[k] + c] : 0;
      }
    }
  }
}

// even[k] = B[row 2k][c] | B[row 2k+1][c] << 16 (AMX's pair-interleaved B
// layout) and odd[k] the pair (2k+1, 2k+2), k counted from -Mb; zero at zero
// positions, outside the rows and for c >= Cb.
DBF_AMX_TARGET void pack_pairs(const uint16_t* b, uint32_t* even, uint32_t* odd, const Geo& g) {
#pragma omp parallel for schedule(static)
  for (long k = 0; k < g.pair_rows; ++k) {
    const long r = 2 * (k - g.Mb);
    const long p[3] = {g.pixel(r), g.pixel(r + 1), g.pixel(r + 2)};
    for (int par = 0; par < 2; ++par) {
      const long p0 = p[par], p1 = p[par + 1];
      uint32_t* dst = (par ? odd : even) + k * g.Bp;
      for (int c = 0; c < g.Bp; c += 16) {
        const __mmask16 in = static_cast<__mmask16>(
            c + 16 <= g.Cb ? 0xffffu : (c < g.Cb ? (1u << (g.Cb - c)) - 1u : 0u));
        const __m256i lo = p0 < 0 ? _mm256_setzero_si256() : _mm256_maskz_loadu_epi16(in, b + p0 * g.Cb + c);
        const __m256i hi = p1 < 0 ? _mm256_setzero_si256() : _mm256_maskz_loadu_epi16(in, b + p1 * g.Cb + c);
        _mm512_storeu_si512(dst + c, _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                                                     _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16)));
      }
    }
  }
}

// acc[t][a][b] += sum_s AT[a][s] * B[s + sign * d_t][b] over every chunk, for
// the nine taps' shifts d_t. sign +1: A is dY (acc is dW[o][i]); -1: A is X
// (dW[i][o] = sum_r X[r + d][i] dY[r][o], so B = dY is read at s - d).
DBF_AMX_TARGET void gemm(const uint16_t* at, const uint32_t* even, const uint32_t* odd, float* acc, const Geo& g, int sign) {
  const uint32_t* bstart[kTaps];  // B's pair row of row s = 0 for each tap
  for (int t = 0; t < kTaps; ++t) {
    const int e = sign * ((t / 3 - 1) * g.W1 + (t % 3 - 1));
    bstart[t] = ((e & 1) ? odd + ((e - 1) / 2 + g.Mb) * static_cast<long>(g.Bp) : even + (e / 2 + g.Mb) * static_cast<long>(g.Bp));
  }
  const long a_stride = kChunk * 2, b_stride = static_cast<long>(g.Bp) * 4, c_stride = b_stride;
  const int bblocks = g.Bp / 32, items = g.Ap / 32 * bblocks;
#pragma omp parallel
  {
    TileConfig cfg{};
    cfg.palette = 1;
    for (int t = 0; t < 8; ++t) {
      cfg.colsb[t] = 64;
      cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    const int i0 = items * tid / nt, i1 = items * (tid + 1) / nt;  // this thread's blocks
    for (long ch = 0; ch < g.chunks; ++ch) {
      const uint16_t* slab = at + ch * g.Ap * kChunk;
      const long bs = ch * (kChunk / 2) * static_cast<long>(g.Bp);
      for (int item = i0; item < i1; ++item) {
        const int ra = item / bblocks * 32, cb = item % bblocks * 32;
        for (int t = 0; t < kTaps; ++t) {
          float* c = acc + (static_cast<long>(t) * g.Ap + ra) * g.Bp + cb;
          _tile_loadd(0, c, c_stride);
          _tile_loadd(1, c + 16, c_stride);
          _tile_loadd(2, c + 16L * g.Bp, c_stride);
          _tile_loadd(3, c + 16L * g.Bp + 16, c_stride);
          const uint16_t* a = slab + ra * kChunk;
          const uint32_t* b = bstart[t] + bs + cb;
          for (int s = 0; s < kChunk; s += 32) {
            _tile_loadd(4, a + s, a_stride);
            _tile_loadd(5, a + 16 * kChunk + s, a_stride);
            _tile_loadd(6, b + (s / 2) * g.Bp, b_stride);
            _tile_loadd(7, b + (s / 2) * g.Bp + 16, b_stride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
          _tile_stored(0, c, c_stride);
          _tile_stored(1, c + 16, c_stride);
          _tile_stored(2, c + 16L * g.Bp, c_stride);
          _tile_stored(3, c + 16L * g.Bp + 16, c_stride);
        }
      }
    }
    _tile_release();
  }
}

}  // namespace

bool conv3x3_wgrad_amx_supported() {
  static const bool ok = amx_usable();
  return ok;
}

int conv3x3_wgrad_amx(const uint16_t* x, const uint16_t* dy, float* dw, int N, int H, int W,
                      int I, int O) {
  if (!conv3x3_wgrad_amx_supported() || N < 1 || H < 1 || W < 1 || I < 1 || O < 1) return 1;
  const bool a_is_dy = O <= I;  // transpose the operand with fewer channels
  const Geo g(N, H, W, a_is_dy ? O : I, a_is_dy ? I : O);
  if (static_cast<long>(N) * H * W * g.Ca > INT32_MAX) return 1;  // 32-bit gather indices
  // Workspaces kept across calls: fresh ones would page-fault in on every call.
  static Buffer<uint16_t> at;
  static Buffer<uint32_t> even, odd;
  static Buffer<float> acc;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  const std::size_t at_n = static_cast<std::size_t>(g.chunks) * g.Ap * kChunk;
  const std::size_t bv_n = static_cast<std::size_t>(g.pair_rows) * g.Bp;
  const std::size_t acc_n = static_cast<std::size_t>(kTaps) * g.Ap * g.Bp;
  at.reserve(at_n);
  even.reserve(bv_n);
  odd.reserve(bv_n);
  acc.reserve(acc_n);
  std::fill(acc.data(), acc.data() + acc_n, 0.0f);
  pack_transposed(a_is_dy ? dy : x, at.data(), g);
  pack_pairs(a_is_dy ? x : dy, even.data(), odd.data(), g);
  gemm(at.data(), even.data(), odd.data(), acc.data(), g, a_is_dy ? 1 : -1);
  // dw (O, 3, 3, I) from acc (tap, Ap, Bp): (tap, o, i) or (tap, i, o).
  const float* ac = acc.data();
#pragma omp parallel for schedule(static)
  for (int o = 0; o < O; ++o)
    for (int t = 0; t < kTaps; ++t) {
      float* dst = dw + (static_cast<long>(o) * kTaps + t) * I;
      if (a_is_dy)
        std::memcpy(dst, ac + (static_cast<long>(t) * g.Ap + o) * g.Bp, sizeof(float) * I);
      else
        for (int i = 0; i < I; ++i) dst[i] = ac[(static_cast<long>(t) * g.Ap + i) * g.Bp + o];
    }
  return 0;
}

#else

bool conv3x3_wgrad_amx_supported() { return false; }

int conv3x3_wgrad_amx(const uint16_t*, const uint16_t*, float*, int, int, int, int, int) {
  return 1;
}

#endif

}  // namespace cpu
DBF_NAMESPACE_END
