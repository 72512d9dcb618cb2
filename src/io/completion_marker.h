// The completion marker of a directory written in several files (a checkpoint, the final model).
//
// Each file is written atomically, but a directory is many files: a kill between two of them leaves
// some new and some missing or old. So the directory is complete only once its marker exists, and
// the marker is written last, after every other file and the directory itself are fsynced. Readers
// trust a directory with the marker; one without it was interrupted while it was written.
#pragma once

#include <filesystem>

namespace ferry {

inline constexpr const char* kCompleteMarker = "COMPLETE";

// Marks DIR complete; call after all of its files are durable (AtomicFile commits them so).
void mark_complete(const std::filesystem::path& dir);

// Whether DIR carries the marker.
bool is_marked_complete(const std::filesystem::path& dir);

// Removes the marker, durably, before any of DIR's files are replaced: a kill while they are
// rewritten must not leave a mix of old and new files that still looks complete.
void unmark_complete(const std::filesystem::path& dir);

}  // namespace ferry
