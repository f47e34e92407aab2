#include "cache_feed.h"

#include <sys/stat.h>

#include "elf_file.h"
#include "files.h"

namespace mmap3 {

void CacheFeed::AddFile(uint32_t pid, uint64_t start, uint64_t end, const BuildId& id,
                     std::string_view path, BuildIdCache::Priority priority) {
  if (cache_ == nullptr || id.empty() || cache_->Seen(id)) return;
  if (path == "[vdso]") {
    // No file: the image comes from the process's memory, which the process
    // can rewrite (its vDSO is private copy-on-write memory), note and code
    // alike.  Stored under the id it claims, it would name other processes'
    // samples: of the vDSO, or of a library whose id it copied (helper-57's
    // review).  Only the kernel's image is stored: byte for byte the
    // reader's own.  (A 32-bit process's vDSO is another image: not stored.)
    if (auto fd = system_.OpenVdso(pid, start, end); fd.ok() && IsOwnVdso(fd->get()))
      cache_->Add(id, "[vdso]", std::move(*fd), priority);
    return;
  }
  if (IsSpecialPath(path)) return;
  // Opening pins the inode; the copy itself happens on the cache's worker.
  auto fd = system_.OpenMapping(pid, start, end);
  if (!fd.ok()) {
    // The mapping is gone (a short-lived process).  The file at the path is
    // acceptable only if it still has this build-id: the id identifies the
    // contents, and the worker checks the copy again.
    auto path_fd = OpenRegularFile(std::string(path));
    if (!path_fd.ok()) return;
    auto path_id = ReadBuildIdFromFd(path_fd->get(), std::string(path));
    if (!path_id.ok() || *path_id != id) return;
    fd = std::move(path_fd);
  }
  // A file another user can write holds whatever build-id note its owner
  // gave it: stored, a copy of a system library with that library's id and
  // symbols of its owner's choosing would name everyone's samples of the
  // library, in this capture's report and in any later one (helper-57's
  // review).  Not stored, and not marked seen: the library's own file, when
  // a mapping of it comes, still is.
  if (!IsTrustedFd(fd->get())) return;
  cache_->Add(id, std::string(path), std::move(*fd), priority);
}

bool CacheFeed::IsOwnVdso(int fd) {
  if (!own_vdso_) {
    own_vdso_.emplace();
    if (auto own = system_.OpenOwnVdso(); own.ok()) {
      if (auto bytes = ReadAllFd(own->get(), 1 << 20, "[vdso]"); bytes.ok())
        *own_vdso_ = std::move(*bytes);
    }
  }
  if (own_vdso_->empty()) return false;
  auto bytes = ReadAllFd(fd, 1 << 20, "[vdso]");
  return bytes.ok() && *bytes == *own_vdso_;
}

void CacheFeed::AddKallsyms(const BuildId& kernel_id,
                         std::shared_ptr<const Kallsyms> kallsyms, std::string text) {
  // The snapshot goes with the capture: a report after a reboot (another
  // KASLR offset, other modules) cannot use the live one.  perf's place
  // and format; owner-only, since the addresses defeat KASLR.  Written by
  // the cache's background worker: 5 MB or more, not on the start path.
  if (cache_ == nullptr || kernel_id.empty() || !kallsyms->complete) return;
  // Any whole snapshot of this image will do (reports relocate it), so
  // one already stored is kept rather than rewritten every run; one cut
  // short, of another image, or readable by others is replaced.
  BuildIdCache::Verifier keep = [kallsyms](int fd, uint64_t) -> Status {
    struct stat st;
    if (fstat(fd, &st) != 0) return ErrnoStatus("stat the stored kallsyms");
    if ((st.st_mode & 077) != 0) return Status::Failure("the stored kallsyms is not owner-only");
    auto stored = ReadAllFd(fd, kMaxKallsymsBytes, "the stored kallsyms");
    if (!stored.ok()) return stored.status();
    const Kallsyms k = ParseKallsyms(*stored);
    if (!k.complete) return Status::Failure("the stored kallsyms is not whole");
    if (!SameKernelImage(k, *kallsyms))
      return Status::Failure("the stored kallsyms lists another image");
    return {};
  };
  // Failures are counted in the cache's stats.
  cache_->AddContents(kernel_id, "[kernel.kallsyms]", "kallsyms", std::move(text), 0400,
                      BuildIdCache::Priority::kBackground, std::move(keep));
}

void CacheFeed::AddModuleSymbols(const BuildId& id, const std::string& name,
                              const KernelModule& module) {
  // Symbols relative to the load address hold for this build of the
  // module in any boot, so they are keyed by its build-id: the same
  // bytes every time, kept if already stored.  Offsets reveal no address.
  if (cache_ == nullptr || id.empty() || module.symbols.empty()) return;
  cache_->AddContents(id, name, "symbols", FormatModuleSymbols(module), 0444,
                      BuildIdCache::Priority::kBackground);
}

}  // namespace mmap3
