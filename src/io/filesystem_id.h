// Which filesystem, on which device, a directory is on: the key under which what was measured of
// a disk (its read and write rates) is remembered, so that another disk_dir on the same filesystem
// reuses the measurement and one on another disk is measured anew.
#pragma once

#include <filesystem>
#include <string>

namespace ferry {

// "dev-MAJOR-MINOR-fs-TYPE-FSID" (hex): the device number (stat st_dev), the filesystem type
// (statfs f_type: ext4, xfs, tmpfs, ...) and its id (f_fsid; ext4 and xfs derive it from the
// filesystem's UUID). Safe as a file name. Refused with the reason when `dir` cannot be read.
std::string filesystem_id(const std::filesystem::path& dir);

}  // namespace ferry
