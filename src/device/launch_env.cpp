#include "device/launch_env.h"

#include <cstdlib>

#include "core/error.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "launch";

int parse_int(const EnvLookup& lookup, const char* name, int fallback, bool required) {
  const std::optional<std::string> value = lookup(name);
  if (!value || value->empty()) {
    FERRY_CHECK(!required, kWhere,
                "{} is not set, but the launcher's other variables are; start the job with "
                "the launcher (torchrun, mpirun, srun) or set it",
                name);
    return fallback;
  }
  size_t used = 0;
  int parsed = 0;
  try {
    parsed = std::stoi(*value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  FERRY_CHECK(used == value->size() && parsed >= 0, kWhere, "{}={} is not a non-negative integer", name,
              *value);
  return parsed;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // Hosts are separated by commas outside brackets; a bracket holds ranges of the first host's suffix.
  const size_t bracket = nodelist.find('['), comma = nodelist.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket))
    return nodelist.substr(0, comma);
  const size_t close = nodelist.find(']', bracket);
  FERRY_CHECK(close != std::string::npos, kWhere, "SLURM_JOB_NODELIST={} has an unclosed '['", nodelist);
  const std::string inside = nodelist.substr(bracket + 1, close - bracket - 1);
  const std::string first = inside.substr(0, inside.find_first_of(",-"));
  return nodelist.substr(0, bracket) + first;
}

LaunchEnv launch_env_from(const EnvLookup& lookup) {
  LaunchEnv env;
  auto has = [&](const char* name) { return lookup(name).has_value(); };
  if (has("RANK") || has("WORLD_SIZE")) {
    env.launcher = "torchrun";
    env.rank = parse_int(lookup, "RANK", 0, true);
    env.world_size = parse_int(lookup, "WORLD_SIZE", 1, true);
    env.local_rank = parse_int(lookup, "LOCAL_RANK", env.rank, false);
    env.local_world_size = parse_int(lookup, "LOCAL_WORLD_SIZE", env.world_size, false);
  } else if (has("OMPI_COMM_WORLD_RANK")) {
    env.launcher = "mpirun";
    env.rank = parse_int(lookup, "OMPI_COMM_WORLD_RANK", 0, true);
    env.world_size = parse_int(lookup, "OMPI_COMM_WORLD_SIZE", 1, true);
    env.local_rank = parse_int(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", env.rank, false);
    env.local_world_size = parse_int(lookup, "OMPI_COMM_WORLD_LOCAL_SIZE", env.world_size, false);
  } else if (has("PMI_RANK")) {
    env.launcher = "mpich";
    env.rank = parse_int(lookup, "PMI_RANK", 0, true);
    env.world_size = parse_int(lookup, "PMI_SIZE", 1, true);
    env.local_rank = parse_int(lookup, "MPI_LOCALRANKID", env.rank, false);
    env.local_world_size = parse_int(lookup, "MPI_LOCALNRANKS", env.world_size, false);
  } else if (has("SLURM_PROCID") && has("SLURM_NTASKS")) {
    // SLURM_PROCID alone is also set in a batch script's own shell; a job step sets both.
    env.launcher = "slurm";
    env.rank = parse_int(lookup, "SLURM_PROCID", 0, true);
    env.world_size = parse_int(lookup, "SLURM_NTASKS", 1, true);
    env.local_rank = parse_int(lookup, "SLURM_LOCALID", 0, false);
    env.local_world_size = env.world_size;
    if (const auto tasks = lookup("SLURM_NTASKS_PER_NODE"); tasks && !tasks->empty())
      env.local_world_size = parse_int(lookup, "SLURM_NTASKS_PER_NODE", env.world_size, false);
    if (const auto nodes = lookup("SLURM_JOB_NODELIST"); nodes && !nodes->empty())
      env.master_addr = first_slurm_host(*nodes);
  }
  FERRY_CHECK(env.world_size >= 1, kWhere,
              "the job's world size ({} launcher) is 0; it counts processes, at least 1", env.launcher);
  FERRY_CHECK(env.rank < env.world_size, kWhere, "rank {} is outside a world of {} processes ({} launcher)",
              env.rank, env.world_size, env.launcher);
  FERRY_CHECK(env.local_rank < env.local_world_size, kWhere,
              "local rank {} is outside the {} processes of this machine ({} launcher)", env.local_rank,
              env.local_world_size, env.launcher);
  if (const auto addr = lookup("MASTER_ADDR"); addr && !addr->empty()) env.master_addr = *addr;
  env.master_port = parse_int(lookup, "MASTER_PORT", env.master_port, false);
  FERRY_CHECK(env.master_port > 0 && env.master_port < 65536, kWhere, "MASTER_PORT={} is not a TCP port",
              env.master_port);
  if (env.distributed() && env.master_addr.empty()) {
    // One machine: the processes meet on it.
    FERRY_CHECK(env.local_world_size == env.world_size, kWhere,
                "a job of {} processes over several machines ({} launcher) needs MASTER_ADDR, the address of "
                "rank 0's machine, to meet there",
                env.world_size, env.launcher);
    env.master_addr = "127.0.0.1";
  }
  return env;
}

LaunchEnv launch_env() {
  return launch_env_from([](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

}  // namespace ferry
