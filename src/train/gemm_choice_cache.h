// GEMM choices (ops/gemm_choice.h) kept between runs on one machine, beside its profiles:
// <cache dir>/gemm-choices/<scope>.json, one file per scope (the GPU, cuBLASLt's version and the
// tuning's settings: Ops::gemm_choice_scope). A run hands its ops the choices kept for their scope
// before its first step, so its products run the algorithms a run before chose, from the first
// call on; the problems it meets that no run met before are tuned as ever and kept once chosen.
//
// Removing the file (or the directory) makes the next run tune every product again; a file that
// cannot be read, is not JSON of ours or belongs to another scope is reported and written anew.
// Two runs on one machine may keep choices at once: each write reads the file again and adds its
// choices to the ones there (the last writer's choice wins for a problem both tuned).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ops/gemm_choice.h"
#include "ops/ops.h"

namespace ferry {

// default_cache_dir("gemm-choices") (train/profile_cache.h): empty when there is no cache dir.
std::filesystem::path default_gemm_choice_dir();

// <dir>/<scope as a file name part>.json
std::filesystem::path gemm_choice_cache_path(const std::filesystem::path& dir, const std::string& scope);

// The choices kept in `file` for `scope`; none when the file is missing. A file that cannot be read
// or is not a GEMM-choice file of `scope` is reported (a warning) and gives none.
std::vector<GemmChoice> read_gemm_choices(const std::filesystem::path& file, const std::string& scope);

// Writes `choices` of `scope` to `file` atomically (io/atomic_file.h), creating its directory;
// throws ferry::Error when it cannot.
void write_gemm_choices(const std::filesystem::path& file, const std::string& scope,
                        const std::vector<GemmChoice>& choices);

// `kept` with `added` laid over it: one choice per problem, `added`'s where both have one, sorted
// by problem.
std::vector<GemmChoice> merge_gemm_choices(const std::vector<GemmChoice>& kept,
                                           const std::vector<GemmChoice>& added);

class GemmChoiceCache {
 public:
  // `dir` empty: nothing is read or kept.
  explicit GemmChoiceCache(std::filesystem::path dir = default_gemm_choice_dir());

  // The choices kept for `scope` (read from its file the first time); none without a directory or
  // for an empty scope.
  const std::vector<GemmChoice>& kept(const std::string& scope);
  // Keeps `settled`, choices of `scope`: writes its file when one is new or changed since this
  // cache last read or wrote it. A file that cannot be written is reported once, never fatal: the
  // next run then tunes those products again. Without file access when nothing changed.
  void keep(const std::string& scope, const std::vector<GemmChoice>& settled);

  // The same for ops: hands `ops` the choices kept for its scope (Ops::adopt_gemm_choices); keeps
  // those it has settled (Ops::gemm_choices).
  void lend(Ops& ops);
  void keep(const Ops& ops);

 private:
  struct Scope {
    std::filesystem::path file;
    std::vector<GemmChoice> kept;  // as last read or written, merge_gemm_choices' order
  };
  Scope& scope(const std::string& name);

  std::filesystem::path dir_;
  std::map<std::string, Scope> scopes_;
  bool write_failed_ = false;
};

}  // namespace ferry
