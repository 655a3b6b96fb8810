#pragma once

#include <gtest/gtest.h>

#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/core/errors.hpp"

/// Skips the test, with the reason, where no GPU is visible.
#define SKIP_WITHOUT_GPU()                             \
  do {                                                 \
    try {                                              \
      (void)::gpu_basics::visible_device_count();      \
    } catch (const ::gpu_basics::no_device_error& e) { \
      GTEST_SKIP() << e.what();                        \
    }                                                  \
  } while (0)
