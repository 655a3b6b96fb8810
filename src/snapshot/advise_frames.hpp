// The Python frames of the requests advice names, read from a snapshot's pickle bytes before the
// advice says which requests those are (advise_bytes.cpp reads them beside the first read, on a
// core it leaves idle). Private to the snapshot module.
#pragma once

#include <cstddef>
#include <functional>
#include <set>
#include <string_view>

#include "gpu_basics/snapshot/advise.hpp"

namespace gpu_basics {

/// The frames of a device's alloc entries numbered as given (see read_alloc_frames()).
using alloc_frames_read = std::function<alloc_frames(int, const std::set<std::size_t>&)>;

/// Reads the pickle `bytes` (named `name` in messages) once, keeping the frames of every alloc
/// entry, and returns their reader (to be called once), which gives what read_alloc_frames()
/// would read from a file of those bytes.
/// @throws format_error as read_alloc_frames().
[[nodiscard]] alloc_frames_read read_all_frames(std::string_view bytes, std::string_view name);

/// attach_frames_from_bytes() with the frames `read` gives.
bool attach_frames_with(advice& a, const torch_snapshot& s, std::string_view name, bool failed,
                        const alloc_frames_read& read);

}  // namespace gpu_basics
