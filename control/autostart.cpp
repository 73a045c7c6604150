// Auto-starting a private vrnicd from a client library (vrnic/autostart.h). Linked into
// libibverbs.so.1 and librdmacm.so.1, which find vrnicd relative to themselves: in the build
// tree at provider/../control/vrnicd, installed at VRNIC_BIN_FROM_LIB/vrnicd.
#include "vrnic/autostart.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "vrnic/ctl_io.h"
#include "vrnic/install_paths.h"
#include "vrnic/socket_path.h"

extern char **environ;

namespace vrnic::ctl {
namespace {

bool autostart_allowed(const std::string &path, int err) {
  const char *env = std::getenv("VRNIC_AUTOSTART");
  return (err == ENOENT || err == ECONNREFUSED) && !std::getenv("VRNIC_SOCKET") &&
         !(env && std::strcmp(env, "0") == 0) && path == default_socket_path();
}

// vrnicd's path: $VRNIC_VRNICD, else next to this library as built or as installed.
std::string vrnicd_path() {
  if (const char *env = std::getenv("VRNIC_VRNICD"); env && *env) return env;
  Dl_info info{};
  if (!::dladdr(reinterpret_cast<void *>(&find_devices), &info) || !info.dli_fname) return "";
  char *real = ::realpath(info.dli_fname, nullptr);
  std::string dir = real ? real : info.dli_fname;
  std::free(real);
  dir.resize(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1);
  const std::string installed = VRNIC_BIN_FROM_LIB "/vrnicd";
  for (const std::string &c : {dir + "../control/vrnicd",
                               installed[0] == '/' ? installed : dir + installed}) {
    if (::access(c.c_str(), X_OK) != 0) continue;
    char *canonical = ::realpath(c.c_str(), nullptr);  // what ps shows: no "../../.."
    std::string path = canonical ? canonical : c;
    std::free(canonical);
    return path;
  }
  return "";
}

void sleep_ms(long ms) {
  timespec t{ms / 1000, (ms % 1000) * 1'000'000};
  ::nanosleep(&t, nullptr);
}

// Starts vrnicd on `path` as a daemon of its own (its own session, reparented to init, its
// output in PATH.log), so that it outlives this program and is never its child to reap.
int spawn_vrnicd(const std::string &vrnicd, const std::string &path) {
  const char *idle = std::getenv("VRNIC_AUTOSTART_IDLE");
  const std::string idle_s = idle && *idle ? idle : "60", log = path + ".log";
  std::vector<std::string> args = {vrnicd, "--socket", path, "--exit-idle", idle_s,
                                   "--autostarted"};
  std::vector<char *> argv;
  for (std::string &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Everything the child needs is made before fork: after it, only async-signal-safe calls.
  std::vector<char *> envp;
  for (char **e = environ; *e; e++)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) envp.push_back(*e);
  envp.push_back(nullptr);
  pid_t child = ::fork();
  if (child < 0) return errno;
  if (child == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    // Nothing of the program's: a socket it left inheritable would stay open in vrnicd.
    ::close_range(3, ~0u, 0);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  int status;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return 0;
}

// Under the lock: another program may have started one meanwhile; else start it and wait
// (10 s at most) until it answers.
int start_and_list(const std::string &path, DeviceListResp *out) {
  int err = list_devices(path.c_str(), out);
  if (err == 0 || !autostart_allowed(path, err)) return err;
  const std::string vrnicd = vrnicd_path();
  if (vrnicd.empty()) {
    std::fprintf(stderr, "vrnic: no vrnicd to start (not beside this library; VRNIC_VRNICD "
                         "names one)\n");
    return err;
  }
  if (int e = spawn_vrnicd(vrnicd, path)) return e;
  for (int waited = 0; waited < 10000; waited += 10) {
    if ((err = list_devices(path.c_str(), out)) == 0) {
      std::fprintf(stderr,
                   "vrnic: started vrnicd (pid %u) at %s; it exits when unused "
                   "(VRNIC_AUTOSTART=0: never start one)\n",
                   out->devices[0].daemon_pid, path.c_str());
      return 0;
    }
    sleep_ms(10);
  }
  std::fprintf(stderr, "vrnic: the vrnicd started at %s did not answer (its log: %s.log)\n",
               path.c_str(), path.c_str());
  return err;
}

}  // namespace

int find_devices(std::string *path, DeviceListResp *out) {
  *path = client_socket_path();
  int err = list_devices(path->c_str(), out);
  if (err == 0 || !autostart_allowed(*path, err)) return err;
  // The default directory in /tmp (socket_path.h) is made private, and not used unless it is
  // ours alone (another user could have made it first, with a link where the lock goes).
  const std::string dir = path->substr(0, path->rfind('/'));
  if (is_private_socket_dir_name(dir) && !is_private_dir(dir)) return err;
  int lock = ::open((*path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock < 0) return err;
  while (::flock(lock, LOCK_EX) < 0 && errno == EINTR) {
  }
  err = start_and_list(*path, out);
  ::close(lock);
  return err;
}

}  // namespace vrnic::ctl
