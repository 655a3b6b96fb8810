#include "gpu_basics/profiler/trace_writer.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#if GPU_BASICS_HAVE_ZLIB
#include <zlib.h>
#endif

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/results.hpp"

namespace gpu_basics {

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20)
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
        else
          out += ch;
    }
  }
  out += '"';
}

namespace {
void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}
// Microseconds with three decimals (nanosecond resolution) without floating-point formatting:
// the writer's hot path.
void append_us(std::string& out, double us) {
  if (!std::isfinite(us) || std::fabs(us) > 9e15) {
    out += "0";
    return;
  }
  std::int64_t ns = std::llround(us * 1000.0);
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  append_int(out, ns / 1000);
  const auto frac = static_cast<int>(ns % 1000);
  const char digits[4] = {'.', static_cast<char>('0' + frac / 100),
                          static_cast<char>('0' + frac / 10 % 10),
                          static_cast<char>('0' + frac % 10)};
  out.append(digits, 4);
}
}  // namespace

void trace_writer::slice(std::string name, std::string category, double ts_us, double dur_us,
                         std::int64_t pid, std::int64_t tid, const nlohmann::json& args) {
  slice_raw(std::move(name), std::move(category), ts_us, dur_us, pid, tid,
            json_text{args.is_object() && args.empty() ? std::string() : args.dump()});
}

void trace_writer::slice_raw(std::string name, std::string category, double ts_us, double dur_us,
                             std::int64_t pid, std::int64_t tid, json_text args) {
  event e;
  e.ph = 'X';
  e.ts = ts_us;
  e.dur = std::max(0.0, dur_us);
  e.pid = pid;
  e.tid = tid;
  e.name = std::move(name);
  e.cat = std::move(category);
  e.args = std::move(args.text);
  events_.push_back(std::move(e));
}

void trace_writer::flow(std::uint64_t id, std::string name, double ts_from_us,
                        std::int64_t pid_from, std::int64_t tid_from, double ts_to_us,
                        std::int64_t pid_to, std::int64_t tid_to) {
  event s;
  s.ph = 's';
  s.id = id;
  s.ts = ts_from_us;
  s.pid = pid_from;
  s.tid = tid_from;
  s.name = name;
  s.cat = "flow";
  event f = s;
  f.ph = 'f';
  f.flow_end = 'e';
  f.ts = ts_to_us;
  f.pid = pid_to;
  f.tid = tid_to;
  f.name = std::move(name);
  events_.push_back(std::move(s));
  events_.push_back(std::move(f));
}

void trace_writer::counter(std::string name, double ts_us, std::int64_t pid, double sample) {
  event e;
  e.ph = 'C';
  e.ts = ts_us;
  e.pid = pid;
  e.has_tid = false;
  e.args = "{";
  append_json_string(e.args, name);
  e.args += std::isfinite(sample) ? fmt::format(":{}}}", sample) : std::string(":null}");
  e.name = std::move(name);
  events_.push_back(std::move(e));
}

void trace_writer::name_track(const char* what, std::int64_t pid, std::optional<std::int64_t> tid,
                              std::string name, int sort_index) {
  event e;
  e.ph = 'M';
  e.pid = pid;
  e.has_tid = tid.has_value();
  e.tid = tid.value_or(0);
  e.name = std::string(what) + "_name";
  e.args = "{\"name\":";
  append_json_string(e.args, name);
  e.args += '}';
  events_.push_back(e);
  if (sort_index >= 0) {
    e.name = std::string(what) + "_sort_index";
    e.args = fmt::format("{{\"sort_index\":{}}}", sort_index);
    events_.push_back(std::move(e));
  }
}

void trace_writer::name_process(std::int64_t pid, std::string name, int sort_index) {
  name_track("process", pid, std::nullopt, std::move(name), sort_index);
}

void trace_writer::name_thread(std::int64_t pid, std::int64_t tid, std::string name,
                               int sort_index) {
  name_track("thread", pid, tid, std::move(name), sort_index);
}

void trace_writer::metadata(const std::string& key, nlohmann::json v) {
  metadata_[key] = std::move(v);
}

std::string trace_writer::to_string() const {
  std::vector<std::size_t> order(events_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const bool ma = events_[a].ph == 'M', mb = events_[b].ph == 'M';
    if (ma != mb) return ma;  // metadata first
    if (ma) return false;
    return events_[a].ts < events_[b].ts;
  });
  std::string out;
  out.reserve(64 + events_.size() * 160);
  out += "{\"traceEvents\":[";
  bool first = true;
  for (const std::size_t i : order) {
    const event& e = events_[i];
    out += first ? "\n{" : ",\n{";
    first = false;
    out += "\"name\":";
    append_json_string(out, e.name);
    if (!e.cat.empty()) {
      out += ",\"cat\":";
      append_json_string(out, e.cat);
    }
    out += ",\"ph\":\"";
    out += e.ph;
    out += '"';
    if (e.ph != 'M') {
      out += ",\"ts\":";
      append_us(out, e.ts);
    }
    if (e.ph == 'X') {
      out += ",\"dur\":";
      append_us(out, e.dur);
    }
    out += ",\"pid\":";
    append_int(out, e.pid);
    if (e.has_tid) {
      out += ",\"tid\":";
      append_int(out, e.tid);
    }
    if (e.ph == 's' || e.ph == 'f') {
      out += ",\"id\":";
      out += std::to_string(e.id);
    }
    if (e.flow_end) out += ",\"bp\":\"e\"";
    if (!e.args.empty()) {
      out += ",\"args\":";
      out += e.args;
    }
    out += '}';
  }
  out += "\n],\"displayTimeUnit\":\"ms\",\"metadata\":";
  out += metadata_.dump();
  out += "}\n";
  return out;
}

nlohmann::json trace_writer::to_json() const {
  return nlohmann::json::parse(to_string());
}

bool trace_writer::gzip_supported() noexcept {
  return GPU_BASICS_HAVE_ZLIB != 0;
}

namespace {
bool ends_with_gz(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

#if GPU_BASICS_HAVE_ZLIB
std::string gzip(const std::string& text, const std::string& path) {
  if (text.size() > 0xFFFFFFFFu)
    throw io_error("cannot write " + path + ": a trace over 4 GiB cannot be compressed here");
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer, which gunzip and Perfetto's loader read.
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw io_error("cannot write " + path + ": zlib would not start");
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int r = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (r != Z_STREAM_END) throw io_error("cannot write " + path + ": compression failed");
  return out;
}
#endif
}  // namespace

void trace_writer::write(const std::string& path) const {
  if (!ends_with_gz(path)) {
    write_file_atomically(path, to_string());
    return;
  }
#if GPU_BASICS_HAVE_ZLIB
  write_file_atomically(path, gzip(to_string(), path));
#else
  throw io_error("cannot write " + path +
                 ": this build has no zlib, so traces cannot be gzip-compressed; drop the .gz");
#endif
}

}  // namespace gpu_basics
