#include "gpu_basics/core/dynamic_library.hpp"

#include <dlfcn.h>

#include "gpu_basics/core/errors.hpp"

namespace gpu_basics {

namespace {
std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}
}  // namespace

dynamic_library::dynamic_library(const std::vector<std::string>& candidates) {
  std::string last_error = "no candidate given";
  for (const auto& c : candidates) {
    if ((handle_ = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      path_ = c;
      return;
    }
    const char* e = dlerror();
    last_error = e ? e : c + ": not found";
  }
  throw error("cannot load " + join(candidates, " or ") + " (" + last_error + ")");
}

dynamic_library::~dynamic_library() {
  if (handle_) dlclose(handle_);
}

dynamic_library& dynamic_library::operator=(dynamic_library&& o) noexcept {
  if (this != &o) {
    if (handle_) dlclose(handle_);
    handle_ = std::exchange(o.handle_, nullptr);
    path_ = std::move(o.path_);
  }
  return *this;
}

void* dynamic_library::symbol(std::initializer_list<const char*> names) const noexcept {
  if (!handle_) return nullptr;
  for (const char* n : names)
    if (void* s = dlsym(handle_, n)) return s;
  return nullptr;
}

void dynamic_library::throw_missing_symbol(std::initializer_list<const char*> names) const {
  std::string list;
  for (const char* n : names) list += (list.empty() ? "" : " or ") + std::string(n);
  throw error(path_ + " lacks " + list);
}

}  // namespace gpu_basics
