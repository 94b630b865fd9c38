#include "agentenv/sandbox_manager.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "agentenv/cgroup.h"
#include "agentenv/isolation.h"
#include "agentenv/layer_copy.h"
#include "base/log.h"

namespace k3::agentenv {
namespace fs = std::filesystem;
namespace {

double mg_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Sandbox uid ranges: 65536 ids each, from 1,000,000 up, clear of the usual subordinate-id ranges
// (100000+) that /etc/subuid hands to users.
constexpr uint32_t kUidFirst = 1000000;
constexpr uint32_t kUidSlots = 30000;

const char* mg_network_name(Network n) { return n == Network::kLoopback ? "loopback" : "none"; }

nlohmann::json mg_spec_json(const SandboxSpec& s) {
  return {{"template", s.template_dir},
          {"network", mg_network_name(s.network)},
          {"limits",
           {{"memory_bytes", s.limits.memory_bytes},
            {"pids", s.limits.pids},
            {"cpu_weight", s.limits.cpu_weight},
            {"cpus", s.limits.cpus}}},
          {"env", s.env}};
}

SandboxSpec mg_spec_from(const nlohmann::json& j) {
  SandboxSpec s;
  s.template_dir = j.at("template").get<std::string>();
  s.network = j.at("network").get<std::string>() == "loopback" ? Network::kLoopback : Network::kNone;
  const auto& l = j.at("limits");
  s.limits.memory_bytes = l.at("memory_bytes").get<int64_t>();
  s.limits.pids = l.at("pids").get<int64_t>();
  s.limits.cpu_weight = l.at("cpu_weight").get<int>();
  s.limits.cpus = l.at("cpus").get<double>();
  s.env = j.at("env").get<std::map<std::string, std::string>>();
  return s;
}

void mg_validate(const SandboxSpec& s) {
  if (!s.template_dir.empty()) {
    K3_CHECK(s.template_dir[0] == '/', "template: must be an absolute path (got ", s.template_dir, ")");
    K3_CHECK(s.template_dir.find_first_of(",:\\") == std::string::npos,
             "template: ", s.template_dir, ": overlayfs cannot take a path with ',', ':' or '\\'");
    struct stat st;
    K3_CHECK(::stat(s.template_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "template: ", s.template_dir,
             " is not a folder");
    K3_CHECK(::access((s.template_dir + "/bin/sh").c_str(), X_OK) == 0, "template: ", s.template_dir,
             " has no /bin/sh, which commands run through");
  }
  K3_CHECK(s.limits.memory_bytes >= (16 << 20), "memory: at least 16 MiB (got ", s.limits.memory_bytes, " bytes)");
  K3_CHECK(s.limits.memory_bytes <= (int64_t{1} << 50), "memory: at most 1 PiB");
  K3_CHECK(s.limits.pids >= 8 && s.limits.pids <= 4194304, "pids: 8 to 4194304 (got ", s.limits.pids, ")");
  K3_CHECK(s.limits.cpu_weight >= 1 && s.limits.cpu_weight <= 10000, "cpu weight: 1 to 10000 (got ", s.limits.cpu_weight, ")");
  K3_CHECK(s.limits.cpus >= 0 && s.limits.cpus <= 4096, "cpus: 0 (no cap) to 4096 (got ", s.limits.cpus, ")");
}

uint64_t mg_fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void mg_mkdir_owned(const std::string& path, mode_t mode, uint32_t uid) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) fail("cannot create ", path, ": ", std::strerror(errno));
  if (::chown(path.c_str(), uid, uid) != 0 || ::chmod(path.c_str(), mode) != 0)
    fail("cannot set the owner of ", path, ": ", std::strerror(errno));
}

}  // namespace

std::vector<std::string> host_system_dirs() {
  std::vector<std::string> dirs;
  for (const char* d : {"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st;
    if (::lstat(d, &st) == 0 && S_ISDIR(st.st_mode)) dirs.push_back(d);
  }
  return dirs;
}

const HostSupport& host_support() {
  static const HostSupport support = [] {
    HostSupport s;
    s.problem = isolation_problem();
    if (!s.problem.empty()) return s;
    const CgroupLayout& layout = cgroup_layout();
    if (!layout.ok) {
      s.problem = layout.problem;
      return s;
    }
    s.cgroups = layout.version;
    s.ok = true;
    return s;
  }();
  return support;
}

nlohmann::json to_json(const SandboxInfo& i) {
  return {{"sandboxID", i.id},
          {"state", state_name(i.state)},
          {"processesAlive", i.processes_alive},
          {"parentID", i.parent_id},
          {"template", i.template_dir},
          {"network", mg_network_name(i.network)},
          {"memoryMB", static_cast<double>(i.limits.memory_bytes) / (1 << 20)},
          {"pids", i.limits.pids},
          {"cpuWeight", i.limits.cpu_weight},
          {"cpus", i.limits.cpus},
          {"createdAt", i.created_at},
          {"expiresAt", i.expires_at},
          {"autoPause", i.auto_pause},
          {"metadata", i.metadata}};
}

SandboxManager::SandboxManager(ManagerOptions options) : options_(std::move(options)) {
  const HostSupport& host = host_support();
  K3_CHECK(host.ok, "sandboxes cannot run on this host: ", host.problem);
  K3_CHECK(!options_.state_dir.empty(), "sandbox state folder: not set");
  K3_CHECK(options_.max_sandboxes >= 1, "max sandboxes: at least 1");
  K3_CHECK(options_.default_ttl_s > 0, "default TTL: must be positive");
  std::error_code ec;
  fs::create_directories(options_.state_dir, ec);
  K3_CHECK(!ec, "sandbox state folder ", options_.state_dir, ": ", ec.message());
  options_.state_dir = fs::canonical(options_.state_dir).string();
  K3_CHECK(options_.state_dir.find_first_of(",:\\") == std::string::npos, "sandbox state folder ",
           options_.state_dir, ": overlayfs cannot take a path with ',', ':' or '\\'");
  ::chmod(options_.state_dir.c_str(), 0711);
  lock_fd_ = ::open((options_.state_dir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  K3_CHECK(lock_fd_ >= 0, "sandbox state folder ", options_.state_dir, ": ", std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    fail("sandbox state folder ", options_.state_dir, " is in use by another k3 env process");
  }
  if (options_.cgroup_name.empty()) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(mg_fnv1a(options_.state_dir)));
    options_.cgroup_name = std::string("k3env-") + hex;
  }
  // What a killed predecessor over the same folder may have left.
  CgroupTree::kill_and_remove_trees(CgroupTree::dirs_of(options_.cgroup_name));
  { CgroupTree root(options_.cgroup_name); }

  // The empty root a sandbox without a template starts from: mount points for the host's system
  // folders, the symlinks of a merged /usr, and the usual top-level folders.
  const std::string skel = options_.state_dir + "/.skeleton";
  fs::remove_all(skel, ec);
  fs::create_directories(skel);
  for (const char* d : {"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st;
    if (::lstat(d, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(d, target, sizeof target - 1);
      if (n > 0) {
        target[n] = 0;
        (void)!::symlink(target, (skel + d).c_str());
      }
    } else if (S_ISDIR(st.st_mode)) {
      fs::create_directories(skel + d);
    }
  }
  for (const char* d : {"proc", "dev", "tmp", "workspace", "root", "home", "var", "var/tmp", "opt", "run", "mnt", "srv"})
    fs::create_directories(skel + "/" + d);
  ::chmod((skel + "/tmp").c_str(), 01777);
  ::chmod((skel + "/var/tmp").c_str(), 01777);

  load_existing();
  start_guardian();
  sweeper_ = std::thread([this] { sweep_loop(); });
}

SandboxManager::~SandboxManager() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  sweep_cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, e] : sandboxes_) {
    try {
      e.sandbox->stop();
      e.sandbox->state_ = SandboxState::kPaused;  // its files wait for resume() on the next start
      e.expires_at = 0;
      save(id, e);
      e.sandbox->cgroup_->remove("");
    } catch (const std::exception& ex) {
      log_warn("k3 env: stopping sandbox ", id, ": ", ex.what());
    }
  }
  sandboxes_.clear();
  CgroupTree::kill_and_remove_trees(CgroupTree::dirs_of(options_.cgroup_name));
  if (guardian_pipe_ >= 0) ::close(guardian_pipe_);
  if (guardian_pid_ > 0) ::waitpid(guardian_pid_, nullptr, 0);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void SandboxManager::start_guardian() {
  std::vector<std::string> dirs = CgroupTree::dirs_of(options_.cgroup_name);
  int p[2];
  K3_CHECK(::pipe2(p, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
  pid_t pid = ::fork();
  K3_CHECK(pid >= 0, "fork: ", std::strerror(errno));
  if (pid == 0) {
    // The guardian: outlives this process if it is killed, and then ends what is left of its
    // sandboxes.  A terminal's Ctrl-C reaches the whole process group: ignored here.
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGTERM, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    ::signal(SIGPIPE, SIG_IGN);
    if (p[0] > 0) ::syscall(SYS_close_range, 0, p[0] - 1, 0);
    ::syscall(SYS_close_range, p[0] + 1, ~0U, 0);
    char c;
    while (::read(p[0], &c, 1) != 0 && errno == EINTR) {
    }
    CgroupTree::kill_and_remove_trees(dirs);
    ::_exit(0);
  }
  ::close(p[0]);
  guardian_pipe_ = p[1];
  guardian_pid_ = pid;
}

std::string SandboxManager::new_id() const {
  static std::mt19937_64 rng{std::random_device{}()};
  for (;;) {
    char id[32];
    std::snprintf(id, sizeof id, "sb-%012llx", static_cast<unsigned long long>(rng() & 0xFFFFFFFFFFFFull));
    if (!sandboxes_.count(id) && !fs::exists(options_.state_dir + "/" + id)) return id;
  }
}

uint32_t SandboxManager::free_uid_base() const {
  std::set<uint32_t> used = reserved_bases_;
  for (const auto& [id, e] : sandboxes_) used.insert(e.sandbox->uid_base_);
  static std::mt19937 rng{std::random_device{}()};
  // A random free slot, so that managers in different processes rarely pick the same range.
  for (int tries = 0; tries < 100000; ++tries) {
    uint32_t base = kUidFirst + (rng() % kUidSlots) * 65536u;
    if (!used.count(base)) return base;
  }
  fail("no free uid range for a new sandbox");
}

std::shared_ptr<Sandbox> SandboxManager::make(const std::string& id, const SandboxSpec& spec, uint32_t uid_base) {
  auto cgroup = std::make_unique<CgroupTree>(options_.cgroup_name + "/" + id);
  cgroup->set_limits(spec.limits);
  return std::shared_ptr<Sandbox>(new Sandbox(id, spec, options_.state_dir + "/" + id, uid_base, std::move(cgroup)));
}

void SandboxManager::save(const std::string& id, const Entry& e) const {
  nlohmann::json j = {{"id", id},
                      {"parent_id", e.parent_id},
                      {"created_at", e.created_at},
                      {"ttl_s", e.ttl_s},
                      {"auto_pause", e.auto_pause},
                      {"metadata", e.metadata},
                      {"uid_base", e.sandbox->uid_base_},
                      {"state", state_name(e.sandbox->state_)},
                      {"spec", mg_spec_json(e.sandbox->spec())}};
  const std::string path = options_.state_dir + "/" + id + "/meta.json", tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << "\n";
    K3_CHECK(out.good(), "cannot write ", tmp);
  }
  K3_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot write ", path, ": ", std::strerror(errno));
}

void SandboxManager::load_existing() {
  for (const auto& dirent : fs::directory_iterator(options_.state_dir)) {
    const std::string name = dirent.path().filename().string();
    if (!dirent.is_directory() || name.rfind("sb-", 0) != 0) continue;
    const std::string meta = dirent.path().string() + "/meta.json";
    try {
      std::ifstream in(meta);
      K3_CHECK(in.good(), "missing");
      nlohmann::json j = nlohmann::json::parse(in);
      K3_CHECK(j.at("id").get<std::string>() == name, "id does not match its folder");
      Entry e;
      e.parent_id = j.at("parent_id").get<std::string>();
      e.created_at = j.at("created_at").get<double>();
      e.ttl_s = j.at("ttl_s").get<double>();
      e.auto_pause = j.at("auto_pause").get<bool>();
      e.metadata = j.at("metadata");
      e.sandbox = make(name, mg_spec_from(j.at("spec")), j.at("uid_base").get<uint32_t>());
      e.sandbox->state_ = SandboxState::kPaused;  // processes ended with the previous server
      sandboxes_[name] = std::move(e);
    } catch (const std::exception& ex) {
      log_warn("k3 env: skipping ", dirent.path().string(), ": meta.json: ", ex.what());
    }
  }
}

SandboxManager::Entry& SandboxManager::entry(const std::string& id) {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) throw NotFound(cat("no sandbox with id '", id, "'"));
  return it->second;
}

const SandboxManager::Entry& SandboxManager::entry(const std::string& id) const {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) throw NotFound(cat("no sandbox with id '", id, "'"));
  return it->second;
}

std::shared_ptr<Sandbox> SandboxManager::create(const CreateOptions& o) {
  mg_validate(o.spec);
  const double ttl = o.ttl_s.value_or(options_.default_ttl_s);
  K3_CHECK(ttl > 0 && ttl <= 30 * 86400, "timeout: must be in (0, 2592000] seconds (got ", ttl, ")");
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(sandboxes_.size() + reserved_bases_.size()) >= options_.max_sandboxes)
    throw Conflict(cat("sandbox limit reached: ", options_.max_sandboxes,
                       " sandboxes exist (running or paused); delete some first"));
  const std::string id = new_id();
  const uint32_t base = free_uid_base();
  const std::string dir = options_.state_dir + "/" + id;
  try {
    mg_mkdir_owned(dir, 0700, 0);
    mg_mkdir_owned(dir + "/upper", 0755, base);
    mg_mkdir_owned(dir + "/upper/workspace", 0755, base);
    mg_mkdir_owned(dir + "/upper/root", 0700, base);
    mg_mkdir_owned(dir + "/upper/tmp", 01777, base);
    Entry e;
    e.sandbox = make(id, o.spec, base);
    e.created_at = mg_now();
    e.ttl_s = ttl;
    e.expires_at = e.created_at + ttl;
    e.auto_pause = o.auto_pause;
    e.metadata = o.metadata;
    e.sandbox->start();
    save(id, e);
    auto sandbox = e.sandbox;
    sandboxes_[id] = std::move(e);
    return sandbox;
  } catch (...) {
    std::error_code ec;
    CgroupTree::kill_and_remove_trees(CgroupTree::dirs_of(options_.cgroup_name + "/" + id));
    fs::remove_all(dir, ec);
    throw;
  }
}

std::shared_ptr<Sandbox> SandboxManager::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entry(id).sandbox;
}

SandboxInfo SandboxManager::info(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = entry(id);
  SandboxInfo i;
  i.id = id;
  i.state = e.sandbox->state();
  i.processes_alive = e.sandbox->processes_alive();
  i.parent_id = e.parent_id;
  i.template_dir = e.sandbox->spec().template_dir;
  i.network = e.sandbox->spec().network;
  i.limits = e.sandbox->spec().limits;
  i.created_at = e.created_at;
  i.expires_at = i.state == SandboxState::kPaused ? 0 : e.expires_at;
  i.auto_pause = e.auto_pause;
  i.metadata = e.metadata;
  return i;
}

std::vector<SandboxInfo> SandboxManager::list() const {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : sandboxes_) ids.push_back(id);
  }
  std::vector<SandboxInfo> out;
  for (const auto& id : ids) {
    try {
      out.push_back(info(id));
    } catch (const NotFound&) {
    }
  }
  return out;
}

void SandboxManager::pause(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(id);
  e.sandbox->pause();
  e.expires_at = 0;
  save(id, e);
}

void SandboxManager::resume(const std::string& id, std::optional<double> ttl_s) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(id);
  if (ttl_s) {
    K3_CHECK(*ttl_s > 0 && *ttl_s <= 30 * 86400, "timeout: must be in (0, 2592000] seconds (got ", *ttl_s, ")");
    e.ttl_s = *ttl_s;
  }
  e.sandbox->resume();
  e.expires_at = mg_now() + e.ttl_s;
  save(id, e);
}

void SandboxManager::set_timeout(const std::string& id, double ttl_s) {
  K3_CHECK(ttl_s > 0 && ttl_s <= 30 * 86400, "timeout: must be in (0, 2592000] seconds (got ", ttl_s, ")");
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(id);
  e.ttl_s = ttl_s;
  if (e.sandbox->state() == SandboxState::kRunning) e.expires_at = mg_now() + ttl_s;
  save(id, e);
}

std::vector<std::shared_ptr<Sandbox>> SandboxManager::fork(const std::string& id, int count, std::optional<double> ttl_s) {
  K3_CHECK(count >= 1 && count <= 16, "count: 1 to 16 children (got ", count, ")");
  // Under the lock: the children's ids, uid ranges and folders are reserved.  The copy itself
  // runs without it, so a large parent does not hold up every other request.
  std::shared_ptr<Sandbox> parent;
  Entry proto;
  std::vector<std::pair<std::string, uint32_t>> made;  // id, uid base
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Entry& pe = entry(id);
    const size_t held = sandboxes_.size() + reserved_bases_.size();
    if (static_cast<int>(held) + count > options_.max_sandboxes)
      throw Conflict(cat("sandbox limit reached: ", held, " exist, ", count, " more would pass the limit of ",
                         options_.max_sandboxes));
    proto.ttl_s = ttl_s.value_or(pe.ttl_s);
    K3_CHECK(proto.ttl_s > 0 && proto.ttl_s <= 30 * 86400, "timeout: must be in (0, 2592000] seconds (got ", proto.ttl_s, ")");
    proto.auto_pause = pe.auto_pause;
    proto.metadata = pe.metadata;
    parent = pe.sandbox;
    for (int k = 0; k < count; ++k) {
      const std::string cid = new_id();
      const uint32_t base = free_uid_base();
      mg_mkdir_owned(options_.state_dir + "/" + cid, 0700, 0);
      reserved_bases_.insert(base);
      made.emplace_back(cid, base);
    }
  }
  auto release = [&](bool remove_files) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [cid, base] : made) {
      reserved_bases_.erase(base);
      if (remove_files) {
        std::error_code ec;
        fs::remove_all(options_.state_dir + "/" + cid, ec);
      }
    }
  };
  Sandbox& p = *parent;
  // Frozen while its layer is copied, so the children see one instant of it.
  bool thaw_after = false;
  try {
    {
      std::lock_guard<std::mutex> plock(p.mu_);
      if (p.state_ == SandboxState::kRunning && p.alive_locked()) {
        p.cgroup_->freeze("");
        thaw_after = true;
      }
    }
    for (const auto& [cid, base] : made) {
      const std::string dir = options_.state_dir + "/" + cid;
      mg_mkdir_owned(dir + "/upper", 0755, base);
      copy_layer(p.dir_ + "/upper", dir + "/upper", p.uid_base_, base);
    }
  } catch (...) {
    if (thaw_after) p.cgroup_->thaw("");
    release(/*remove_files=*/true);
    throw;
  }
  if (thaw_after) p.cgroup_->thaw("");
  // The children start after the parent runs again: their start-up does not hold it frozen.
  std::vector<std::shared_ptr<Sandbox>> children;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [cid, base] : made) reserved_bases_.erase(base);
  try {
    for (const auto& [cid, base] : made) {
      Entry e;
      e.sandbox = make(cid, p.spec(), base);
      e.parent_id = id;
      e.created_at = mg_now();
      e.ttl_s = proto.ttl_s;
      e.expires_at = e.created_at + proto.ttl_s;
      e.auto_pause = proto.auto_pause;
      e.metadata = proto.metadata;
      e.sandbox->start();
      save(cid, e);
      children.push_back(e.sandbox);
      sandboxes_[cid] = std::move(e);
    }
  } catch (...) {
    for (const auto& [cid, base] : made) {
      auto it = sandboxes_.find(cid);
      if (it != sandboxes_.end()) {
        it->second.sandbox->stop();
        sandboxes_.erase(it);
      }
      CgroupTree::kill_and_remove_trees(CgroupTree::dirs_of(options_.cgroup_name + "/" + cid));
      std::error_code ec;
      fs::remove_all(options_.state_dir + "/" + cid, ec);
    }
    throw;
  }
  return children;
}

void SandboxManager::destroy(const std::string& id) {
  std::shared_ptr<Sandbox> sandbox;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entry(id);
    sandbox = e.sandbox;
    sandboxes_.erase(id);
  }
  {
    std::lock_guard<std::mutex> slock(sandbox->mu_);
    sandbox->deleted_ = true;  // a command or file call still holding it must not start it again
  }
  sandbox->stop();
  sandbox->cgroup_->remove("");
  std::error_code ec;
  fs::remove_all(options_.state_dir + "/" + id, ec);
  if (ec) log_warn("k3 env: removing the files of sandbox ", id, ": ", ec.message());
}

void SandboxManager::sweep_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    sweep_cv_.wait_for(lock, std::chrono::duration<double>(options_.sweep_interval_s));
    if (stopping_) break;
    const double now = mg_now();
    std::vector<std::string> expired;
    for (auto& [id, e] : sandboxes_)
      if (e.expires_at > 0 && e.expires_at <= now && e.sandbox->state() == SandboxState::kRunning) expired.push_back(id);
    for (const auto& id : expired) {
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) continue;  // destroyed meanwhile
      Entry& e = it->second;
      try {
        if (e.auto_pause) {
          e.sandbox->pause();
          e.expires_at = 0;
          save(id, e);
        } else {
          lock.unlock();
          destroy(id);
          lock.lock();
        }
      } catch (const std::exception& ex) {
        log_warn("k3 env: TTL of sandbox ", id, ": ", ex.what());
        if (sandboxes_.count(id)) sandboxes_.at(id).expires_at = 0;
      }
    }
  }
}

}  // namespace k3::agentenv
