// A snapshot file's pickle, read as read_torch_snapshot() reads it (gzip or not, within the input
// size cap, its first bytes checked first), for readers of the snapshot module that keep other
// parts of it (advise_frames.cpp: the Python frames).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "gpu_basics/snapshot/pickle.hpp"

namespace gpu_basics {

/// Reads the file's pickle with the options given (it may be called again, as a read that starts
/// over without a sink is).
using snapshot_pickle_read = std::function<pickle::value(const pickle::read_options&)>;
using snapshot_pickle_use = std::function<void(const snapshot_pickle_read&, std::string_view)>;

/// Calls `use` with the reader of the snapshot at `path` and the file's printable name.
/// @throws format_error as read_torch_snapshot() for a file that is not a snapshot pickle.
void with_snapshot_pickle(const std::string& path, const snapshot_pickle_use& use);

}  // namespace gpu_basics
