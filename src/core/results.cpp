#include "gpu_basics/core/results.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"

namespace gpu_basics::presentation {

void table::add_row(std::vector<value> row) {
  GPU_BASICS_EXPECTS(row.size() == columns.size(), "row of " + std::to_string(row.size()) +
                                                       " cells in table '" + id + "' of " +
                                                       std::to_string(columns.size()) + " columns");
  rows.push_back(std::move(row));
}

std::string render_cell(const value& v, const column& c) {
  struct visitor {
    const column& c;
    std::string operator()(std::monostate) const { return "n/a"; }
    std::string operator()(bool b) const { return b ? "yes" : "no"; }
    std::string operator()(std::int64_t i) const {
      if (c.display_scale == 1.0) return std::to_string(i);
      return fmt::format("{:.{}f}", static_cast<double>(i) * c.display_scale, c.precision);
    }
    std::string operator()(double d) const {
      if (!std::isfinite(d)) return "n/a";
      return fmt::format("{:.{}f}", d * c.display_scale, c.precision);
    }
    std::string operator()(const std::string& s) const { return s; }
  };
  return std::visit(visitor{c}, v);
}

std::string render_text(const table& t) {
  const std::size_t n = t.columns.size();
  std::vector<std::vector<std::string>> cells;
  std::vector<std::size_t> width(n, 0);
  std::vector<bool> numeric(n, true);
  for (std::size_t i = 0; i < n; ++i) width[i] = t.columns[i].header.size();
  for (const auto& row : t.rows) {
    std::vector<std::string> r;
    for (std::size_t i = 0; i < n; ++i) {
      r.push_back(render_cell(row[i], t.columns[i]));
      width[i] = std::max(width[i], r.back().size());
      if (std::holds_alternative<std::string>(row[i]) || std::holds_alternative<bool>(row[i]))
        numeric[i] = false;
    }
    cells.push_back(std::move(r));
  }
  std::string out;
  if (!t.title.empty()) out += t.title + "\n\n";
  const auto line = [&](const std::vector<std::string>& r, bool header) {
    out += "|";
    for (std::size_t i = 0; i < n; ++i) {
      const bool right = numeric[i] && !header;
      out += right ? fmt::format(" {:>{}} |", r[i], width[i])
                   : fmt::format(" {:<{}} |", r[i], width[i]);
    }
    out += "\n";
  };
  std::vector<std::string> head;
  for (const auto& c : t.columns) head.push_back(c.header);
  line(head, true);
  out += "|";
  for (std::size_t i = 0; i < n; ++i)
    out += std::string(width[i] + 1, '-') + (numeric[i] ? ":|" : "-|");
  out += "\n";
  for (const auto& r : cells) line(r, false);
  for (const auto& note : t.notes) out += "\n" + note;
  if (!t.notes.empty()) out += "\n";
  return out;
}

nlohmann::json to_json(const value& v) {
  struct visitor {
    nlohmann::json operator()(std::monostate) const { return nullptr; }
    nlohmann::json operator()(bool b) const { return b; }
    nlohmann::json operator()(std::int64_t i) const { return i; }
    nlohmann::json operator()(double d) const {
      if (!std::isfinite(d)) return nullptr;
      return d;
    }
    nlohmann::json operator()(const std::string& s) const { return s; }
  };
  return std::visit(visitor{}, v);
}

nlohmann::json to_json(const table& t) {
  nlohmann::json cols = nlohmann::json::array();
  for (const auto& c : t.columns) cols.push_back(c.key);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : t.rows) {
    nlohmann::json o = nlohmann::json::object();
    for (std::size_t i = 0; i < t.columns.size(); ++i) o[t.columns[i].key] = to_json(r[i]);
    rows.push_back(std::move(o));
  }
  return {{"id", t.id}, {"title", t.title}, {"columns", cols}, {"rows", rows}, {"notes", t.notes}};
}

namespace {
std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csv_cell(const value& v) {
  struct visitor {
    std::string operator()(std::monostate) const { return ""; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const {
      if (!std::isfinite(d)) return "";
      return fmt::format("{:.17g}", d);
    }
    std::string operator()(const std::string& s) const { return csv_escape(s); }
  };
  return std::visit(visitor{}, v);
}
}  // namespace

std::string render_csv(const table& t) {
  std::string out;
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    out += (i ? "," : "") + csv_escape(t.columns[i].key);
  out += "\n";
  for (const auto& r : t.rows) {
    for (std::size_t i = 0; i < r.size(); ++i) out += (i ? "," : "") + csv_cell(r[i]);
    out += "\n";
  }
  return out;
}

std::vector<std::string> write_csv(const std::vector<table>& tables, const std::string& path) {
  std::vector<std::string> written;
  if (tables.size() > 1 && writes_in_place(path)) {  // a device or FIFO: one stream of tables
    std::string all;
    for (const auto& t : tables) all += (all.empty() ? "" : "\n") + render_csv(t);
    write_file_atomically(path, all);
    written.push_back(path);
    return written;
  }
  if (tables.size() == 1) {
    write_file_atomically(path, render_csv(tables.front()));
    written.push_back(path);
    return written;
  }
  std::filesystem::path p(path);
  const std::string ext = p.has_extension() ? p.extension().string() : ".csv";
  p.replace_extension();
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& t : tables) {
    files.emplace_back(p.string() + "." + t.id + ext, render_csv(t));
    written.push_back(files.back().first);
  }
  write_files_atomically(files);
  return written;
}

}  // namespace gpu_basics::presentation

namespace gpu_basics {

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

/// Writes `contents` to an existing special file, without creating, truncating or renaming it.
void write_in_place(const std::string& path, const std::string& contents) {
  int fd = -1;
  while ((fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC)) < 0) {
    if (errno != EINTR) throw io_error("cannot write " + printable(path) + ": " + errno_text());
    throw_if_interrupted();  // a FIFO waiting for a reader
  }
  const struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_fd{fd};
  std::size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno != EINTR) throw io_error("cannot write " + printable(path) + ": " + errno_text());
      throw_if_interrupted();
      continue;
    }
    done += static_cast<std::size_t>(n);
  }
}

/// The deepest directory of `dir` or above it that exists ("." for a relative path's start).
std::filesystem::path nearest_existing(std::filesystem::path dir) {
  std::error_code ec;
  while (!dir.empty() && !std::filesystem::exists(dir, ec) && dir.has_relative_path())
    dir = dir.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

/// Checks that `dir` is a directory that can take new files, or that the nearest directory above
/// it that exists can (the missing ones are made when writing). `what` begins the message.
void check_can_create_in(const std::filesystem::path& dir, const std::string& what) {
  const std::filesystem::path existing = nearest_existing(dir);
  std::error_code ec;
  if (!std::filesystem::is_directory(existing, ec))
    throw io_error(what + ": " + printable(existing.string()) + " is not a directory");
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    throw io_error(what + ": cannot create files in " + printable(existing.string()) + " (" +
                   errno_text() + ")");
}

}  // namespace

bool writes_in_place(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return true;
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir =
      std::filesystem::canonical(parent.empty() ? std::filesystem::path(".") : parent, ec).string();
  if (ec) return false;
  return dir == "/dev" || dir.rfind("/dev/", 0) == 0 || dir.rfind("/proc/", 0) == 0;
}

void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string shown = printable(path);
  const fs::path target(path);
  if (!target.has_filename())
    throw io_error("cannot write " + shown + ": it names a directory, not a file");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw io_error("cannot write " + shown + ": it is a directory");
    if (writes_in_place(path)) {
      if (::access(path.c_str(), W_OK) != 0)
        throw io_error("cannot write " + shown + ": " + errno_text());
      return;
    }
  } else if (errno != ENOENT) {
    throw io_error("cannot write " + shown + ": " + errno_text());
  }
  check_can_create_in(target.parent_path(), "cannot write " + shown);
}

void check_writable_directory(const std::string& path) {
  check_can_create_in(path, "cannot write into the directory " + printable(path));
}

namespace {

/// Writes `contents` into a temporary file beside `path` (making missing directories) and returns
/// the temporary's path.
std::filesystem::path write_temporary(const std::string& path, const std::string& contents) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec)
      throw io_error("cannot create directory '" + target.parent_path().string() + "' for " + path +
                     ": " + ec.message());
  }
  if (fs::is_directory(target, ec)) throw io_error("cannot write " + path + ": it is a directory");
  const fs::path tmp = target.string() + ".tmp-" + std::to_string(::getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw io_error("cannot write " + path + ": cannot create " + tmp.string());
  out << contents;
  out.flush();
  if (!out) {
    out.close();
    fs::remove(tmp, ec);
    throw io_error("cannot write " + path + ": write failed (disk full?)");
  }
  return tmp;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& contents) {
  write_files_atomically({{path, contents}});
}

void write_files_atomically(const std::vector<std::pair<std::string, std::string>>& files) {
  namespace fs = std::filesystem;
  std::vector<std::pair<fs::path, fs::path>> renames;  // temporary -> target
  const auto remove_temporaries = [&](std::size_t from) {
    std::error_code ignored;
    for (std::size_t i = from; i < renames.size(); ++i) fs::remove(renames[i].first, ignored);
  };
  try {
    for (const auto& [path, contents] : files)
      if (!writes_in_place(path)) renames.emplace_back(write_temporary(path, contents), path);
    throw_if_interrupted();  // an interrupted run renames nothing
    // Devices and FIFOs (/dev/full, a pipe) before any rename: one that fails leaves no file.
    for (const auto& [path, contents] : files)
      if (writes_in_place(path)) write_in_place(path, contents);
  } catch (...) {
    remove_temporaries(0);
    throw;
  }
  for (std::size_t i = 0; i < renames.size(); ++i) {
    // rename() replaces a symbolic link at the target with the file; its target is untouched.
    std::error_code ec;
    fs::rename(renames[i].first, renames[i].second, ec);
    if (ec) {
      remove_temporaries(i);
      throw io_error("cannot write " + renames[i].second.string() + ": " + ec.message());
    }
  }
}

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  struct stat sa {
  }, sb{};
  const bool ea = ::stat(a.c_str(), &sa) == 0;
  const bool eb = ::stat(b.c_str(), &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea || eb) return false;
  const auto canonical_name = [](const std::string& p) {
    const fs::path path(p);
    std::error_code ec;
    const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
    fs::path dir = fs::weakly_canonical(parent, ec);
    if (ec) dir = fs::absolute(parent, ec);
    return (dir / path.filename()).lexically_normal().string();
  };
  return canonical_name(a) == canonical_name(b);
}

}  // namespace gpu_basics
