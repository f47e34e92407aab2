#include "perf_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "files.h"
#include "keyed_hash.h"

namespace mmap3 {
namespace {

using nlohmann::json;

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// 1 to 16 hex digits with an optional 0x, taken off the front of `s`.
bool TakeHex(std::string_view& s, uint64_t* value) {
  if (s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  uint64_t v = 0;
  size_t n = 0;
  for (; n < s.size(); ++n) {
    const char c = s[n];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      break;
    }
    if (n == 16) return false;  // more than 64 bits
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  if (n == 0) return false;
  s.remove_prefix(n);
  *value = v;
  return true;
}

// At least one blank, taken off the front of `s`.
bool TakeBlanks(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && IsBlank(s[n])) ++n;
  s.remove_prefix(n);
  return n != 0;
}

bool ParseLine(std::string_view line, PerfMapEntry* e) {
  uint64_t start = 0, size = 0;
  if (!TakeHex(line, &start) || !TakeBlanks(line) || !TakeHex(line, &size) || !TakeBlanks(line))
    return false;
  while (!line.empty() && IsBlank(line.back())) line.remove_suffix(1);
  if (line.empty() || size == 0 || start + size < start) return false;
  if (line.find('\0') != std::string_view::npos) return false;
  e->start = start;
  e->size = size;
  e->name = PrintableUtf8(line);
  return true;
}

}  // namespace

bool IsJitMappingPath(std::string_view path) {
  return path.empty() || path == "//anon" || path.starts_with("[anon:") ||
         path.starts_with("/memfd:") || path.starts_with("memfd:");
}

std::string PerfMapFileName(uint32_t pid) { return fmt::format("perf-{}.map", pid); }

PerfMapText ParsePerfMap(std::string_view text) {
  PerfMapText out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) {
      out.incomplete_last_line = true;
      break;
    }
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // empty
    PerfMapEntry e;
    if (ParseLine(line, &e)) {
      out.entries.push_back(std::move(e));
    } else {
      ++out.skipped_lines;
    }
  }
  return out;
}

const char* PerfMapTakenName(PerfMapTaken taken) {
  switch (taken) {
    case PerfMapTaken::kRunning: return "running";
    case PerfMapTaken::kExit: return "exit";
    case PerfMapTaken::kEnd: return "end";
  }
  return "?";
}

std::optional<PerfMapTaken> PerfMapTakenFromName(std::string_view name) {
  for (PerfMapTaken t : {PerfMapTaken::kRunning, PerfMapTaken::kExit, PerfMapTaken::kEnd})
    if (name == PerfMapTakenName(t)) return t;
  return std::nullopt;
}

PerfMap::PerfMap(PerfMapText text, PerfMapTaken taken, uint64_t bytes)
    : entries_(std::move(text.entries)),
      skipped_lines_(text.skipped_lines),
      incomplete_(text.incomplete_last_line),
      taken_(taken),
      bytes_(bytes) {
  // Each entry, in file order, takes its range from those before it.
  for (uint32_t i = 0; i < entries_.size(); ++i) {
    const uint64_t s = entries_[i].start, e = s + entries_[i].size;
    auto it = index_.lower_bound(s);
    if (it != index_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.first > s) {  // starts before s, reaches into [s, e)
        const auto old = prev->second;
        prev->second.first = s;
        if (old.first > e) index_[e] = old;  // and beyond: its tail stays
      }
    }
    it = index_.lower_bound(s);
    while (it != index_.end() && it->first < e) {
      if (it->second.first > e) {  // its tail reaches past e
        const auto old = it->second;
        index_.erase(it);
        index_[e] = old;
        break;
      }
      it = index_.erase(it);
    }
    index_[s] = {e, i};
  }
  // Where lines of more than one name overlap: a sweep over the lines'
  // ends, counting the lines of each name that cover each stretch.
  KeyedMap<std::string_view, uint32_t> name_ids;
  std::vector<std::tuple<uint64_t, int, uint32_t>> edges;  // (address, +1/-1, name)
  edges.reserve(entries_.size() * 2);
  for (const PerfMapEntry& e : entries_) {
    const uint32_t id = name_ids.try_emplace(e.name, static_cast<uint32_t>(name_ids.size())).first->second;
    edges.emplace_back(e.start, 1, id);
    edges.emplace_back(e.start + e.size, -1, id);
  }
  std::sort(edges.begin(), edges.end());
  std::vector<uint32_t> covering(name_ids.size(), 0);
  size_t names = 0;  // with covering[id] > 0
  for (size_t k = 0; k < edges.size();) {
    const uint64_t at = std::get<0>(edges[k]);
    for (; k < edges.size() && std::get<0>(edges[k]) == at; ++k) {
      uint32_t& c = covering[std::get<2>(edges[k])];
      if (std::get<1>(edges[k]) > 0) {
        if (c++ == 0) ++names;
      } else if (--c == 0) {
        --names;
      }
    }
    if (names < 2 || k == edges.size()) continue;
    const uint64_t next = std::get<0>(edges[k]);
    if (!several_names_.empty() && std::prev(several_names_.end())->second == at) {
      std::prev(several_names_.end())->second = next;  // continues the last stretch
    } else {
      several_names_[at] = next;
    }
  }
}

bool PerfMap::SeveralNames(uint64_t address) const {
  auto it = several_names_.upper_bound(address);
  if (it == several_names_.begin()) return false;
  return address < std::prev(it)->second;
}

const PerfMapEntry* PerfMap::Find(uint64_t address) const {
  auto it = index_.upper_bound(address);
  if (it == index_.begin()) return nullptr;
  --it;
  if (address >= it->second.first || SeveralNames(address)) return nullptr;
  return &entries_[it->second.second];
}

void PerfMaps::Set(uint32_t pid, PerfMap map) {
  auto [it, inserted] = maps_.try_emplace(pid);
  if (!inserted) bytes_ -= it->second.bytes();
  bytes_ += map.bytes();
  it->second = std::move(map);
}

const PerfMap* PerfMaps::Find(uint32_t pid) const {
  auto it = maps_.find(pid);
  return it == maps_.end() ? nullptr : &it->second;
}

PerfMap* PerfMaps::FindMutable(uint32_t pid) {
  auto it = maps_.find(pid);
  return it == maps_.end() ? nullptr : &it->second;
}

void PerfMaps::Forget(uint32_t pid) {
  auto it = maps_.find(pid);
  if (it == maps_.end()) return;
  bytes_ -= it->second.bytes();
  maps_.erase(it);
}

void PerfMaps::Refuse(uint32_t pid, std::string reason) {
  for (const PerfMapRefusal& r : refusals_)
    if (r.pid == pid && r.reason == reason) return;
  refusals_.push_back({pid, std::move(reason)});
}

json PerfMaps::ToJson() const {
  json maps = json::array();
  for (const auto& [pid, map] : maps_) {
    json entries = json::array();
    for (const PerfMapEntry& e : map.entries()) entries.push_back(json::array({e.start, e.size, e.name}));
    maps.push_back({{"pid", pid},
                    {"taken", PerfMapTakenName(map.taken())},
                    {"bytes", map.bytes()},
                    {"skipped_lines", map.skipped_lines()},
                    {"incomplete_last_line", map.incomplete_last_line()},
                    {"entries", std::move(entries)}});
  }
  json refused = json::array();
  for (const PerfMapRefusal& r : refusals_) refused.push_back({{"pid", r.pid}, {"reason", r.reason}});
  return {{"maps", std::move(maps)}, {"refused", std::move(refused)}};
}

PerfMaps PerfMaps::FromJson(const json& doc, uint64_t* bad) {
  PerfMaps out;
  auto field = [](const json& o, const char* key) -> const json* {
    auto it = o.find(key);
    return it == o.end() ? nullptr : &*it;
  };
  auto pid_of = [](const json* p) -> std::optional<uint32_t> {
    if (p == nullptr || !p->is_number_unsigned() || p->get<uint64_t>() > UINT32_MAX) return std::nullopt;
    return static_cast<uint32_t>(p->get<uint64_t>());
  };
  if (!doc.is_object()) {
    ++*bad;
    return out;
  }
  if (const json* maps = field(doc, "maps"); maps && maps->is_array()) {
    for (const json& m : *maps) {
      if (!m.is_object()) {
        ++*bad;
        continue;
      }
      const auto pid = pid_of(field(m, "pid"));
      const json* taken = field(m, "taken");
      const json* bytes = field(m, "bytes");
      const json* skipped = field(m, "skipped_lines");
      const json* entries = field(m, "entries");
      std::optional<PerfMapTaken> when;
      if (taken && taken->is_string()) when = PerfMapTakenFromName(taken->get<std::string>());
      if (!pid || !when || !bytes || !bytes->is_number_unsigned() || !skipped ||
          !skipped->is_number_unsigned() || !entries || !entries->is_array()) {
        ++*bad;
        continue;
      }
      PerfMapText text;
      text.skipped_lines = skipped->get<uint64_t>();
      if (const json* inc = field(m, "incomplete_last_line"); inc && inc->is_boolean())
        text.incomplete_last_line = inc->get<bool>();
      for (const json& e : *entries) {
        // The writer's rules again: a file may say anything.
        if (!e.is_array() || e.size() != 3 || !e[0].is_number_unsigned() ||
            !e[1].is_number_unsigned() || !e[2].is_string()) {
          ++text.skipped_lines;
          continue;
        }
        PerfMapEntry entry{e[0].get<uint64_t>(), e[1].get<uint64_t>(),
                           PrintableUtf8(e[2].get<std::string>())};
        if (entry.size == 0 || entry.start + entry.size < entry.start || entry.name.empty()) {
          ++text.skipped_lines;
          continue;
        }
        text.entries.push_back(std::move(entry));
      }
      out.Set(*pid, PerfMap(std::move(text), *when, bytes->get<uint64_t>()));
    }
  } else {
    ++*bad;
  }
  if (const json* refused = field(doc, "refused"); refused && refused->is_array()) {
    for (const json& r : *refused) {
      const auto pid = r.is_object() ? pid_of(field(r, "pid")) : std::nullopt;
      const json* reason = r.is_object() ? field(r, "reason") : nullptr;
      if (!pid || !reason || !reason->is_string()) {
        ++*bad;
        continue;
      }
      out.Refuse(*pid, PrintableUtf8(reason->get<std::string>()));
    }
  }
  return out;
}

PerfMapRead ReadPerfMapAt(int dir, const std::string& name, const std::string& shown,
                          const std::optional<PerfMapOwner>& owner, uint64_t max_bytes,
                          const PerfMapStamp* unchanged_from) {
  using Outcome = PerfMapRead::Outcome;
  PerfMapRead out;
  auto stamp_of = [](const struct stat& st) {
    return PerfMapStamp{st.st_dev,          st.st_ino,           static_cast<uint64_t>(st.st_size),
                        st.st_mtim.tv_sec,  st.st_mtim.tv_nsec,  st.st_ctim.tv_sec,
                        st.st_ctim.tv_nsec};
  };
  if (unchanged_from != nullptr) {
    // lstat opens nothing: a map polled while its process runs costs one
    // system call when it has not changed.
    struct stat st;
    if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      out.outcome = errno == ENOENT ? Outcome::kMissing : Outcome::kFailed;
      out.reason = fmt::format("stat {}: {}", shown, std::strerror(errno));
      return out;
    }
    if (S_ISREG(st.st_mode) && stamp_of(st) == *unchanged_from) {
      out.outcome = Outcome::kUnchanged;
      out.stamp = *unchanged_from;
      return out;
    }
  }
  // O_PATH|O_NOFOLLOW, fstat, and only a regular file is opened for
  // reading (files.h): a symlink, FIFO or device is refused, not followed
  // or opened.
  Result<UniqueFd> fd = OpenRegularFileAt(dir, name, shown);
  if (!fd.ok()) {
    const Status& s = fd.status();
    if (s.error_number() == ENOENT) {
      out.outcome = Outcome::kMissing;
    } else {
      out.outcome = s.error_number() == 0 ? Outcome::kRefused : Outcome::kFailed;
      out.reason = s.ToString();
    }
    return out;
  }
  struct stat st;
  if (fstat(fd->get(), &st) != 0) {
    out.outcome = Outcome::kFailed;
    out.reason = ErrnoStatus("stat " + shown).ToString();
    return out;
  }
  auto refuse = [&](std::string why) {
    out.outcome = Outcome::kRefused;
    out.reason = shown + ": " + why;
    return out;
  };
  if (!owner) return refuse("the process's uid is not known (it ended before it was read)");
  if (st.st_uid != owner->ruid && st.st_uid != owner->euid && st.st_uid != 0) {
    return refuse(owner->ruid == owner->euid
                      ? fmt::format("owned by uid {}, not by the process's uid {} or root",
                                    st.st_uid, owner->ruid)
                      : fmt::format("owned by uid {}, not by the process's uids {}/{} or root",
                                    st.st_uid, owner->ruid, owner->euid));
  }
  // A second of slack: the start time is worked out from clock ticks and
  // the boot time, the file's from the real-time clock.
  if (owner->started_sec && st.st_mtim.tv_sec < *owner->started_sec - 1) {
    return refuse(fmt::format(
        "last written before the process started (at {} s, the process at {} s): an earlier "
        "process's map with the same pid",
        st.st_mtim.tv_sec, *owner->started_sec));
  }
  if (st.st_nlink != 1)
    return refuse(fmt::format("{} hard links (a link to another file?)", st.st_nlink));
  if (st.st_mode & S_IWOTH) return refuse("writable by every user");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return refuse(fmt::format("{} bytes, more than the {} a map may have", st.st_size, max_bytes));
  // The JIT may append while we read: read what is there, up to the bound.
  std::string text;
  text.resize(static_cast<size_t>(st.st_size) + 4096 <= max_bytes
                  ? static_cast<size_t>(st.st_size) + 4096
                  : static_cast<size_t>(max_bytes) + 1);
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd->get(), text.data() + got, text.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      out.outcome = Outcome::kFailed;
      out.reason = ErrnoStatus("read " + shown).ToString();
      return out;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
    if (got == text.size() && got <= max_bytes) text.resize(std::min<size_t>(got * 2, max_bytes + 1));
  }
  if (got > max_bytes)
    return refuse(fmt::format("more than the {} bytes a map may have", max_bytes));
  text.resize(got);
  out.outcome = Outcome::kRead;
  out.text = std::move(text);
  out.stamp = stamp_of(st);
  return out;
}

}  // namespace mmap3
