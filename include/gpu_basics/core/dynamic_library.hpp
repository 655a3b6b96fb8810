// A shared library loaded at run time (dlopen), and the binding of its C symbols to function
// pointers. NVML and NCCL come in this way: nothing of theirs is needed to build, and a machine
// without them says so instead of failing to start. The one dlopen helper of the library.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace gpu_basics {

/// An owned dlopen handle (RTLD_NOW | RTLD_LOCAL); dlclose on destruction. Move-only.
class dynamic_library {
 public:
  /// Empty: nothing loaded.
  dynamic_library() noexcept = default;
  /// Loads the first of `candidates` (a file name the loader searches for, or a path) that
  /// loads.
  /// @throws gpu_basics::error naming every candidate and the loader's last message.
  explicit dynamic_library(const std::vector<std::string>& candidates);
  /// Closes the library (dlclose).
  ~dynamic_library();
  /// Takes over `o`'s handle; `o` is left empty.
  dynamic_library(dynamic_library&& o) noexcept
      : handle_(std::exchange(o.handle_, nullptr)), path_(std::move(o.path_)) {}
  /// Closes the library held, then takes over `o`'s.
  dynamic_library& operator=(dynamic_library&& o) noexcept;
  dynamic_library(const dynamic_library&) = delete;
  dynamic_library& operator=(const dynamic_library&) = delete;

  /// Whether a library is loaded.
  [[nodiscard]] explicit operator bool() const noexcept { return handle_ != nullptr; }
  /// The candidate that loaded.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

  /// The address of the first of `names` the library exports (list newer symbol versions
  /// first), or nullptr.
  [[nodiscard]] void* symbol(std::initializer_list<const char*> names) const noexcept;

  /// Points `fn` at the first of `names` the library exports. Returns false, and leaves `fn`
  /// null, when it exports none of them: for entry points the caller can do without.
  template <class F>
  bool bind(F& fn, std::initializer_list<const char*> names) const noexcept {
    // POSIX guarantees a data pointer from dlsym converts to a function pointer.
    fn = reinterpret_cast<F>(symbol(names));
    return fn != nullptr;
  }

  /// As bind(), for an entry point the caller cannot do without.
  /// @throws gpu_basics::error naming the library and the symbol.
  template <class F>
  void bind_required(F& fn, std::initializer_list<const char*> names) const {
    if (!bind(fn, names)) throw_missing_symbol(names);
  }

 private:
  [[noreturn]] void throw_missing_symbol(std::initializer_list<const char*> names) const;
  void* handle_ = nullptr;
  std::string path_;
};

}  // namespace gpu_basics
