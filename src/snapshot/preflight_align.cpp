// Pre-flight's model: the recordings' allocations aligned pairwise as a diff aligns lines (Myers'
// O((N+M)D) algorithm over a match of stream, frames and size class, a match of the same size
// first), each free aligned with its block's counterpart's free, the alignment checked for
// consistency (matched events in the same order in both; a block freed in both or neither; no
// allocation of one site replaced by another), then each allocation's size fitted as a + b * batch
// per base recording.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"
#include "gpu_basics/snapshot/preflight.hpp"

namespace gpu_basics {

namespace {

constexpr std::size_t kNone = SIZE_MAX;
/// The allocations of each recording one diff aligns at a time, and how many of them may differ:
/// beyond that they are not the same job's steps.
constexpr std::size_t kWindow = 2048;
constexpr std::size_t kMaxDifferences = 1024;
/// How far ahead a diff looks for a match of the same size before matching two sizes.
constexpr std::size_t kLookahead = 4;
/// The share of the longest recording's events a recording may have unmatched (a larger batch's
/// workspaces); beyond it the recordings are not the same steps.
constexpr std::size_t kMaxUnmatchedPercent = 50;

__extension__ using i128 = __int128;  // exact products of sizes and batches

/// A recording's events as the alignment sees them: frees of blocks never allocated dropped (the
/// replay skips them too), each event with its block's size, frames and partner.
struct sequence {
  const batch_recording* rec = nullptr;
  std::vector<std::size_t> index;  // its index in rec->events
  std::vector<char> is_free;
  std::vector<std::size_t> partner;   // an alloc's free (kNone: never freed), a free's alloc
  std::vector<std::uint64_t> size;    // the block's requested size
  std::vector<std::uint32_t> frames;  // the block's frames, interned (0: none)
  std::vector<stream_handle> stream;
  [[nodiscard]] std::size_t size_n() const noexcept { return index.size(); }
};

sequence sequence_of(const batch_recording& r,
                     std::unordered_map<std::string, std::uint32_t>& interned) {
  sequence s;
  s.rec = &r;
  std::unordered_map<std::uint64_t, std::size_t> live;  // id -> its alloc
  for (std::size_t i = 0; i < r.events.size(); ++i) {
    const replay_event& e = r.events[i];
    if (e.kind == replay_event::op::alloc) {
      std::uint32_t f = 0;
      if (i < r.frames.size() && !r.frames[i].empty())
        f = interned.emplace(r.frames[i], static_cast<std::uint32_t>(interned.size() + 1))
                .first->second;
      live[e.id] = s.size_n();  // an id allocated again leaks its first block, as replayed
      s.index.push_back(i);
      s.is_free.push_back(0);
      s.partner.push_back(kNone);
      s.size.push_back(e.bytes);
      s.frames.push_back(f);
      s.stream.push_back(e.stream);
      continue;
    }
    const auto it = live.find(e.id);
    if (it == live.end()) continue;
    const std::size_t a = it->second;
    live.erase(it);
    s.partner[a] = s.size_n();
    s.index.push_back(i);
    s.is_free.push_back(1);
    s.partner.push_back(a);
    s.size.push_back(s.size[a]);
    s.frames.push_back(s.frames[a]);
    s.stream.push_back(e.stream);
  }
  return s;
}

/// Whether a block of `sa` bytes at batch `ba` may be one of `sb` bytes at batch `bb` > `ba`: the
/// same size, or a larger one that grows at most twice as fast as the batch (a + b * batch with
/// b >= 0 and a not far below 0; whether it is affine is checked against a third recording).
bool same_size_class(std::uint64_t sa, std::size_t ba, std::uint64_t sb, std::size_t bb) {
  return sa == sb || (sa < sb && static_cast<i128>(sb) * ba <= 2 * static_cast<i128>(sa) * bb);
}

/// Whether two events may be the same one of the job, in recordings at batches `a`'s < `b`'s.
struct matcher {
  const sequence& a;
  const sequence& b;
  bool operator()(std::size_t x, std::size_t y) const {
    if (a.is_free[x] != b.is_free[y] || a.stream[x] != b.stream[y]) return false;
    if (a.frames[x] && b.frames[y] && a.frames[x] != b.frames[y]) return false;
    return same_size_class(a.size[x], a.rec->batch, b.size[y], b.rec->batch);
  }
  /// A match of the same size (a constant).
  [[nodiscard]] bool exact(std::size_t x, std::size_t y) const {
    return a.size[x] == b.size[y] && (*this)(x, y);
  }
  /// A match of sizes in proportion to the batches (an activation: 4 MiB at batch 2, 8 MiB at 4).
  [[nodiscard]] bool proportional(std::size_t x, std::size_t y) const {
    return static_cast<i128>(b.size[y]) * a.rec->batch ==
           static_cast<i128>(a.size[x]) * b.rec->batch;
  }
  /// Whether a diff's snake may take the match (x, y): an exact or proportional one, or one of two
  /// sizes with no exact match for either within kLookahead events of the other (an inserted
  /// workspace of the same site before a constant: the constant is matched with itself, not with
  /// the workspace). A proportional match goes first: where tensors double as the batch does, the
  /// next tensor at the smaller batch is often exactly as large as this one at the larger.
  [[nodiscard]] bool takes(std::size_t x, std::size_t y) const {
    if (!(*this)(x, y)) return false;
    if (a.size[x] == b.size[y] || proportional(x, y)) return true;
    for (std::size_t j = 1; j <= kLookahead; ++j)
      if ((y + j < b.size_n() && exact(x, y + j)) || (x + j < a.size_n() && exact(x + j, y)))
        return false;
    return true;
  }
};

std::string frames_text(const sequence& s, std::size_t k) {
  const std::size_t i = s.index[s.is_free[k] ? s.partner[k] : k];
  return i < s.rec->frames.size() && !s.rec->frames[i].empty() ? ", frames: " + s.rec->frames[i]
                                                               : std::string(", no frames");
}

/// "event 12 of batch 8 (alloc of 4096 B on stream 0, frames: ...)", a free "(free of event 7's
/// block of 4096 B ...)".
std::string describe(const sequence& s, std::size_t k) {
  const std::string what = s.is_free[k]
                               ? fmt::format("free of event {}'s block of", s.index[s.partner[k]])
                               : std::string("alloc of");
  return fmt::format("event {} of batch {} ({} {} B on stream {}{})", s.index[k], s.rec->batch,
                     what, s.size[k], s.stream[k], frames_text(s, k));
}

std::string names(const sequence& a, const sequence& b) {
  return fmt::format("{} (batch {}) and {} (batch {})", printable(a.rec->name), a.rec->batch,
                     printable(b.rec->name), b.rec->batch);
}

using pairs_t = std::vector<std::pair<std::size_t, std::size_t>>;

/// The shortest edit script's matched pairs between a[x0, xe) and b[y0, ye), in order; nullopt
/// where more than `most` events differ.
std::optional<pairs_t> myers(const matcher& eq, std::size_t x0, std::size_t xe, std::size_t y0,
                             std::size_t ye, std::size_t most_differences) {
  const auto n = static_cast<std::int64_t>(xe - x0), m = static_cast<std::int64_t>(ye - y0);
  const auto most = std::min(static_cast<std::int64_t>(most_differences), n + m);
  std::vector<std::int64_t> v(static_cast<std::size_t>(2 * most + 3), 0);
  const auto at = [&](std::int64_t k) -> std::int64_t& {
    return v[static_cast<std::size_t>(k + most + 1)];
  };
  const auto same = [&](std::int64_t x, std::int64_t y) {
    return eq.takes(x0 + static_cast<std::size_t>(x), y0 + static_cast<std::size_t>(y));
  };
  std::vector<std::vector<std::int64_t>> saved;  // per d: v[-d .. d] after step d
  std::int64_t found = -1;
  for (std::int64_t d = 0; d <= most && found < 0; ++d) {
    for (std::int64_t k = -d; k <= d; k += 2) {
      std::int64_t x = k == -d || (k != d && at(k - 1) < at(k + 1)) ? at(k + 1) : at(k - 1) + 1;
      std::int64_t y = x - k;
      while (x < n && y < m && same(x, y)) {
        ++x;
        ++y;
      }
      at(k) = x;
      if (x >= n && y >= m) found = d;
    }
    saved.emplace_back(v.begin() + (most + 1 - d), v.begin() + (most + 2 + d));
  }
  if (found < 0) return std::nullopt;
  pairs_t pairs;
  std::int64_t x = n, y = m;
  for (std::int64_t d = found; d > 0; --d) {
    const std::vector<std::int64_t>& prev = saved[static_cast<std::size_t>(d - 1)];
    const auto pv = [&](std::int64_t k) { return prev[static_cast<std::size_t>(k + d - 1)]; };
    const std::int64_t k = x - y;
    const std::int64_t pk = k == -d || (k != d && pv(k - 1) < pv(k + 1)) ? k + 1 : k - 1;
    const std::int64_t px = pv(pk), py = px - pk;
    for (; x > px && y > py; --x, --y)  // the snake after the edit, back to its start
      pairs.emplace_back(x0 + static_cast<std::size_t>(x - 1),
                         y0 + static_cast<std::size_t>(y - 1));
    x = px;
    y = py;
  }
  for (; x > 0 && y > 0; --x, --y)
    pairs.emplace_back(x0 + static_cast<std::size_t>(x - 1), y0 + static_cast<std::size_t>(y - 1));
  std::reverse(pairs.begin(), pairs.end());
  return pairs;
}

/// The matched pairs of `a` and `b`: Myers' diff over windows of kWindow events of each, the
/// first half of each window's script kept (a long trace differs at many places, once per step:
/// the whole trace in one diff would cost its length times every difference).
/// @throws preflight_error where more than kMaxDifferences allocations differ within a window.
pairs_t diff(const sequence& a, const sequence& b) {
  const matcher eq{a, b};
  pairs_t pairs;
  // The same steps at both batches (a training step allocates the same tensors at every batch,
  // each of its own size): matched position by position. A diff's lookahead would be fooled
  // here: at twice the batch, a tensor is often exactly as large as the next one was (4 MiB then
  // 8 MiB at batch 2; 8 MiB then 16 MiB at batch 4), and the same-size match shifts the rest.
  if (a.size_n() == b.size_n()) {
    std::size_t k = 0;
    while (k < a.size_n() && eq(k, k)) ++k;
    if (k == a.size_n()) {
      for (std::size_t i = 0; i < k; ++i) pairs.emplace_back(i, i);
      return pairs;
    }
  }
  std::size_t x0 = 0, y0 = 0;
  while (x0 < a.size_n() && y0 < b.size_n()) {
    const std::size_t xe = std::min(a.size_n(), x0 + kWindow);
    const std::size_t ye = std::min(b.size_n(), y0 + kWindow);
    const auto w = myers(eq, x0, xe, y0, ye, kMaxDifferences);
    const bool last = xe == a.size_n() && ye == b.size_n();
    std::size_t kept = 0;
    if (w)
      for (const auto& p : *w) {
        if (!last && (p.first >= x0 + kWindow / 2 || p.second >= y0 + kWindow / 2)) break;
        pairs.push_back(p);
        ++kept;
      }
    if (last && w) return pairs;
    if (kept == 0) {
      std::size_t p = 0;  // the events they share first
      while (x0 + p < a.size_n() && y0 + p < b.size_n() && eq(x0 + p, y0 + p)) ++p;
      const std::size_t ia = x0 + p < a.size_n() ? a.index[x0 + p] : a.rec->events.size();
      const std::size_t ib = y0 + p < b.size_n() ? b.index[y0 + p] : b.rec->events.size();
      throw preflight_error(
          fmt::format(
              "{} part at their event {} / {} and more than {} of the next {} "
              "allocations differ: not the same job's steps (record the same steps at every batch)",
              names(a, b), ia, ib, kMaxDifferences, kWindow),
          ia);
    }
    x0 = pairs.back().first + 1;
    y0 = pairs.back().second + 1;
  }
  // One ran out: what the other has left differs too, under the same limit.
  if (const std::size_t tail = (a.size_n() - x0) + (b.size_n() - y0); tail > kMaxDifferences) {
    const std::size_t ia = x0 < a.size_n() ? a.index[x0] : a.rec->events.size();
    const std::size_t ib = y0 < b.size_n() ? b.index[y0] : b.rec->events.size();
    throw preflight_error(
        fmt::format(
            "{} part at their event {} / {}: one ends there and the other has {} more "
            "allocations, more than {} differences: not the same job's steps (record the same "
            "steps at every batch)",
            names(a, b), ia, ib, tail, kMaxDifferences),
        ia);
  }
  return pairs;
}

/// Two recordings aligned: per event of each, its counterpart in the other (kNone: none).
struct alignment {
  std::vector<std::size_t> to_b, to_a;
};

/// Two recordings' allocations aligned: a diff, then no allocation of one site in place of
/// another's.
alignment align_events(const sequence& a, const sequence& b) {
  alignment al{std::vector<std::size_t>(a.size_n(), kNone),
               std::vector<std::size_t>(b.size_n(), kNone)};
  const auto pairs = diff(a, b);
  for (const auto& [x, y] : pairs) {
    al.to_b[x] = y;
    al.to_a[y] = x;
  }
  // In order: each stretch of unmatched events, then the match after it.
  std::size_t x = 0, y = 0;
  for (std::size_t i = 0; i <= pairs.size(); ++i) {
    const std::size_t mx = i < pairs.size() ? pairs[i].first : a.size_n();
    const std::size_t my = i < pairs.size() ? pairs[i].second : b.size_n();
    // One site's allocation replaced by another's: its size left the size class.
    for (std::size_t p = x; p < mx; ++p)
      for (std::size_t q = y; q < my && !a.is_free[p]; ++q)
        if (!b.is_free[q] && a.stream[p] == b.stream[q] && a.frames[p] &&
            a.frames[p] == b.frames[q])
          throw preflight_error(
              fmt::format("{} part at {}, where the other has {}: an allocation in place of "
                          "another whose size does not grow as a + b * batch (b >= 0) from one "
                          "to the other, or that is not the same allocation; no consistent "
                          "alignment",
                          names(a, b), describe(a, p), describe(b, q)),
              a.index[p]);
    if (i == pairs.size()) break;
    x = mx + 1;
    y = my + 1;
  }
  return al;
}

/// `s`'s allocations alone (each event's index kept; no partners: a free follows its allocation).
sequence allocations_of(const sequence& s, std::vector<std::size_t>& origin) {
  sequence o;
  o.rec = s.rec;
  for (std::size_t k = 0; k < s.size_n(); ++k) {
    if (s.is_free[k]) continue;
    origin.push_back(k);
    o.index.push_back(s.index[k]);
    o.is_free.push_back(0);
    o.partner.push_back(kNone);
    o.size.push_back(s.size[k]);
    o.frames.push_back(s.frames[k]);
    o.stream.push_back(s.stream[k]);
  }
  return o;
}

/// The allocations aligned (a diff over them alone), each free with its block's counterpart's free,
/// then the order checked: matched events come in the same order in both recordings.
alignment align(const sequence& a, const sequence& b) {
  std::vector<std::size_t> oa, ob;
  const sequence aa = allocations_of(a, oa), bb = allocations_of(b, ob);
  const alignment allocs = align_events(aa, bb);
  alignment al{std::vector<std::size_t>(a.size_n(), kNone),
               std::vector<std::size_t>(b.size_n(), kNone)};
  for (std::size_t x = 0; x < aa.size_n(); ++x) {
    if (allocs.to_b[x] == kNone) continue;
    const std::size_t px = oa[x], py = ob[allocs.to_b[x]];
    al.to_b[px] = py;
    al.to_a[py] = px;
    const std::size_t fx = a.partner[px], fy = b.partner[py];
    if ((fx == kNone) != (fy == kNone)) {
      const bool a_frees = fx != kNone;
      const sequence& s = a_frees ? a : b;
      const sequence& o = a_frees ? b : a;
      throw preflight_error(
          fmt::format("{} part at {}: batch {} never frees its counterpart ({}); no consistent "
                      "alignment",
                      names(a, b), describe(s, a_frees ? fx : fy), o.rec->batch,
                      describe(o, a_frees ? py : px)),
          s.index[a_frees ? fx : fy]);
    }
    if (fx != kNone) {
      al.to_b[fx] = fy;
      al.to_a[fy] = fx;
    }
  }
  return al;
}

}  // namespace

batch_model::batch_model(std::vector<batch_recording> recordings)
    : recordings_(std::move(recordings)) {
  const std::size_t n = recordings_.size();
  if (n < 2 || n > 3) throw logic_error(fmt::format("preflight: 2 or 3 recordings, got {}", n));
  for (std::size_t i = 0; i < n; ++i)
    if (recordings_[i].batch == 0 || (i > 0 && recordings_[i].batch <= recordings_[i - 1].batch))
      throw logic_error("preflight: the batches must be above 0 and increase");
  std::unordered_map<std::string, std::uint32_t> interned;
  std::vector<sequence> seqs;
  std::size_t longest = 0;
  for (const auto& r : recordings_) {
    seqs.push_back(sequence_of(r, interned));
    if (seqs.back().size_n() == 0)
      throw preflight_error(
          fmt::format("{} (batch {}): no allocations in its trace to model (was the snapshot "
                      "recorded with _record_memory_history while the steps ran?)",
                      printable(r.name), r.batch),
          0);
    longest = std::max(longest, seqs.back().size_n());
  }
  // match[i][j]: recording i's events in recording j (kNone: none).
  std::vector<std::vector<std::vector<std::size_t>>> match(
      n, std::vector<std::vector<std::size_t>>(n));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      alignment al = align(seqs[i], seqs[j]);
      match[i][j] = std::move(al.to_b);
      match[j][i] = std::move(al.to_a);
    }
  models_.resize(n);
  for (std::size_t r = n; r-- > 0;) {  // the largest first: its messages name its events
    const sequence& s = seqs[r];
    model& mo = models_[r];
    std::vector<std::uint32_t> block_of(s.size_n(), 0);
    std::uint32_t blocks = 0;
    for (std::size_t k = 0; k < s.size_n(); ++k) {
      slot sl;
      sl.kind = s.is_free[k] ? replay_event::op::free : replay_event::op::alloc;
      sl.stream = s.stream[k];
      sl.event = s.index[k];
      std::vector<std::pair<std::int64_t, std::int64_t>> points{
          {static_cast<std::int64_t>(recordings_[r].batch), static_cast<std::int64_t>(s.size[k])}};
      for (std::size_t o = 0; o < n; ++o)
        if (o != r && match[r][o][k] != kNone)
          points.emplace_back(static_cast<std::int64_t>(recordings_[o].batch),
                              static_cast<std::int64_t>(seqs[o].size[match[r][o][k]]));
      if (points.size() < n) ++mo.unmatched;
      if (s.is_free[k]) {
        sl.block = block_of[s.partner[k]];
        mo.slots.push_back(sl);
        continue;
      }
      sl.block = block_of[k] = blocks++;
      std::sort(points.begin(), points.end());
      const auto& lo = points.front();
      const auto& hi = points.back();
      sl.size_lo = lo.second;
      sl.batch_lo = lo.first;
      sl.rise = hi.second - lo.second;
      sl.run = std::max<std::int64_t>(1, hi.first - lo.first);
      const bool three = points.size() == 3;
      const auto& mid = points[three ? 1 : 0];
      const bool affine = !three || static_cast<i128>(mid.second - lo.second) * sl.run ==
                                        static_cast<i128>(sl.rise) * (mid.first - lo.first);
      // The smallest batch's size (rise >= 0: batch 1's is the least): below 0, the fit is
      // wrong there, and a prediction at small batches would be too. Refused once, here.
      const i128 at1 =
          static_cast<i128>(sl.size_lo) - static_cast<i128>(sl.rise) * (sl.batch_lo - 1) / sl.run;
      // Scratch (a workspace freed within its operation) whose size is not affine: piecewise.
      if ((!affine || at1 < 0) && s.partner[k] != kNone && s.partner[k] - k <= kScratchSpan) {
        sl.npoints = static_cast<std::uint8_t>(points.size());
        for (std::size_t i = 0; i < points.size(); ++i) {
          sl.point_batch[i] = points[i].first;
          sl.point_size[i] = points[i].second;
        }
        if (mo.scratch.count++ == 0) mo.scratch.first = describe(s, k);
        // Above the largest recording the last segment is extrapolated: it grows if that rises.
        mo.grows =
            mo.grows || sl.rise > 0 || points.back().second > points[points.size() - 2].second;
        mo.slots.push_back(sl);
        continue;
      }
      if (!affine)
        throw preflight_error(
            fmt::format(
                "{}: the size of {} is not affine in the batch: {} B at batch {}, {} B "
                "at batch {}, {} B at batch {} (a + b * batch through the first and "
                "last gives {:.1f} B at batch {})",
                printable(recordings_[r].name), describe(s, k), lo.second, lo.first, mid.second,
                mid.first, hi.second, hi.first,
                static_cast<double>(lo.second) + static_cast<double>(sl.rise) *
                                                     static_cast<double>(mid.first - lo.first) /
                                                     static_cast<double>(sl.run),
                mid.first),
            s.index[k]);
      if (at1 < 0)
        throw preflight_error(
            fmt::format("{}: the size of {} would be below 0 at batch 1 ({} B at batch {}, {} B "
                        "at batch {}: a + b * batch with a = {:.0f} B); it grows faster than in "
                        "proportion to the batch, not affine (record smaller batches)",
                        printable(recordings_[r].name), describe(s, k), lo.second, lo.first,
                        hi.second, hi.first,
                        static_cast<double>(lo.second) - static_cast<double>(sl.rise) *
                                                             static_cast<double>(lo.first) /
                                                             static_cast<double>(sl.run)),
            s.index[k]);
      mo.grows = mo.grows || sl.rise > 0;
      mo.slots.push_back(sl);
    }
    // Most of it unmatched: not the same steps (the model would be the recording itself).
    if (mo.unmatched > longest * kMaxUnmatchedPercent / 100)
      throw preflight_error(
          fmt::format("{} (batch {}): {} of its {} events have no counterpart in another "
                      "recording, more than {}% of the longest ({} events): not the same job's "
                      "steps (record the same steps at every batch)",
                      printable(recordings_[r].name), recordings_[r].batch, mo.unmatched,
                      s.size_n(), kMaxUnmatchedPercent, longest),
          0);
  }
}

namespace {
/// lo + rise * (batch - batch_lo) / run, a size between whole bytes rounded up.
i128 on_line(std::int64_t lo, std::int64_t rise, std::int64_t batch_lo, std::int64_t run,
             std::int64_t batch) {
  const i128 num = static_cast<i128>(rise) * (batch - batch_lo);
  i128 q = num / run;
  if (num > 0 && num % run != 0) ++q;
  return lo + q;
}
}  // namespace

i128 batch_model::size_at(const slot& sl, std::int64_t batch) {
  if (sl.npoints == 0) return on_line(sl.size_lo, sl.rise, sl.batch_lo, sl.run, batch);
  const std::int64_t* pb = sl.point_batch;
  const std::int64_t* ps = sl.point_size;
  // Below the smallest recording: in proportion to it (a scratch buffer's size at most, as the
  // lines of faster growth would come below it), at least one byte.
  if (batch < pb[0]) {
    const i128 num = static_cast<i128>(ps[0]) * batch;
    return std::max<i128>(1, num / pb[0] + (num % pb[0] != 0));
  }
  // The segment of the two recordings nearest: the one the batch lies in, or the last above.
  const std::size_t i = sl.npoints == 3 && batch > pb[1] ? 1 : 0;
  return std::max<i128>(1, on_line(ps[i], ps[i + 1] - ps[i], pb[i],
                                   std::max<std::int64_t>(1, pb[i + 1] - pb[i]), batch));
}

std::vector<replay_event> batch_model::trace_at(std::size_t batch) const {
  if (batch == 0) throw logic_error("preflight: a batch of 0");
  // The recording closest to the batch (the larger of two as close).
  std::size_t base = 0;
  const auto distance = [&](std::size_t i) {
    const std::size_t b = recordings_[i].batch;
    return b > batch ? b - batch : batch - b;
  };
  for (std::size_t i = 1; i < recordings_.size(); ++i)
    if (distance(i) <= distance(base)) base = i;
  const model& mo = models_[base];
  std::vector<replay_event> out;
  out.reserve(mo.slots.size());
  for (const slot& sl : mo.slots) {
    replay_event e;
    e.kind = sl.kind;
    e.stream = sl.stream;
    e.id = std::uint64_t{sl.block} + 1;
    if (sl.kind == replay_event::op::alloc) {
      const i128 size = size_at(sl, static_cast<std::int64_t>(batch));
      if (size < 0 || size > static_cast<i128>(kMaxReplayBytes))
        throw preflight_error(
            fmt::format("at batch {} the allocation of event {} of batch {} ({}) would be {} "
                        "bytes: beyond what a replay holds ({})",
                        batch, sl.event, recordings_[base].batch, printable(recordings_[base].name),
                        size < 0 ? std::string("below 0") : std::string("over 4 TiB"),
                        format_bytes(kMaxReplayBytes)),
            sl.event);
      e.bytes = static_cast<std::size_t>(size);
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace gpu_basics
