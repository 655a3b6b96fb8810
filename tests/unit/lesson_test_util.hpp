// Shared by the lesson tests: results with varied, non-trivial figures.
#pragma once

#include <cstddef>
#include <string>

#include <gtest/gtest.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/stats.hpp"

namespace gpu_basics::testing {

/// A summary around `median` whose fields all differ (so a field dropped or swapped in a round
/// trip shows).
inline summary spread_around(double median, std::size_t count = 20) {
  summary s;
  s.count = count;
  s.median = median;
  s.mean = median * 1.01;
  s.min = median * 0.93;
  s.max = median * 1.07;
  s.stdev = median * 0.02;
  s.p25 = median * 0.98;
  s.p75 = median * 1.02;
  s.iqr = s.p75 - s.p25;
  s.rel_spread = s.iqr / median;
  return s;
}

/// Runs `read`, which must throw a json_path_error at `path` whose detail contains `detail`.
template <class Read>
void expect_path_error(Read&& read, const std::string& path, const std::string& detail) {
  try {
    read();
    ADD_FAILURE() << "no error; expected one at '" << path << "'";
  } catch (const json_path_error& e) {
    EXPECT_EQ(e.path(), path) << e.what();
    EXPECT_NE(e.detail().find(detail), std::string::npos) << e.what();
  }
}

}  // namespace gpu_basics::testing
