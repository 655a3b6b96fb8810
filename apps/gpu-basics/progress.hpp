// A one-line progress display on stderr, only when stderr is a terminal.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace gpu_basics::cli {

class progress {
 public:
  explicit progress(std::string what, int total) : what_(std::move(what)), total_(total), tty_(isatty(2) != 0) {}
  ~progress() {
    if (tty_ && shown_) std::fprintf(stderr, "\r\033[K");
  }
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;
  void step(const std::string& item) {
    ++done_;
    if (!tty_) return;
    std::fprintf(stderr, "\r\033[K[%s %d/%d] %s", what_.c_str(), done_, total_, item.c_str());
    std::fflush(stderr);
    shown_ = true;
  }

 private:
  std::string what_;
  int total_;
  int done_ = 0;
  bool tty_;
  bool shown_ = false;
};

}  // namespace gpu_basics::cli
