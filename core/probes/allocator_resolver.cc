// SPDX-License-Identifier: Apache-2.0
#include "core/probes/allocator_resolver.h"

#include <algorithm>
#include <deque>
#include <set>

#include "core/proc/procfs.h"

namespace lw {

namespace {

constexpr size_t kMaxPreloadNameBytes = 4096;

std::string_view last_component(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

void split_into(std::string_view text, std::string_view separators, size_t max_entries,
                std::vector<std::string>& out) {
  size_t pos = 0;
  while (pos < text.size() && out.size() < max_entries) {
    size_t end = text.find_first_of(separators, pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(pos, end - pos);
    if (!item.empty() && item.size() <= kMaxPreloadNameBytes) out.emplace_back(item);
    pos = end + 1;
  }
}

bool is_libstdcxx(const LoadedObject& o) {
  std::string_view soname = o.elf ? std::string_view(o.elf->soname()) : std::string_view();
  std::string_view base = last_component(o.path);
  return soname.rfind("libstdc++.so", 0) == 0 || base.rfind("libstdc++.so", 0) == 0;
}

bool provider_matches(ProviderClass p, const LoadedObject& o) {
  switch (p) {
    case ProviderClass::kAny: return true;
    case ProviderClass::kLibstdcxx: return is_libstdcxx(o);
    case ProviderClass::kNotLibstdcxx: return !is_libstdcxx(o);
  }
  return false;
}

}  // namespace

const char* support_name(Support s) {
  switch (s) {
    case Support::kFull: return "full";
    case Support::kPartial: return "partial";
    case Support::kUnsupported: return "unsupported";
    case Support::kPending: return "pending";
  }
  return "?";
}

std::vector<std::string> parse_ld_preload_environ(std::string_view environ, size_t max_entries) {
  std::vector<std::string> out;
  // The loader reads the first LD_PRELOAD (getenv semantics).
  if (std::optional<std::string_view> v = environ_value(environ, "LD_PRELOAD"))
    split_into(*v, " :", max_entries, out);
  return out;
}

std::vector<std::string> parse_ld_so_preload(std::string_view text, size_t max_entries) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size() && out.size() < max_entries) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    split_into(line, " \t\r:", max_entries, out);
    pos = end + 1;
  }
  return out;
}

std::optional<size_t> match_object(const std::vector<LoadedObject>& objects,
                                   std::string_view name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string_view::npos) {
    for (size_t i = 0; i < objects.size(); ++i)
      if (objects[i].path == name) return i;
  }
  std::string_view base = last_component(name);
  for (size_t i = 0; i < objects.size(); ++i)
    if (objects[i].elf && objects[i].elf->soname() == base) return i;
  for (size_t i = 0; i < objects.size(); ++i)
    if (last_component(objects[i].path) == base) return i;
  return std::nullopt;
}

SearchOrder global_search_order(const std::vector<LoadedObject>& objects, size_t exe,
                                const PreloadList& preload) {
  SearchOrder s;
  std::vector<bool> seen(objects.size(), false);
  std::deque<size_t> queue;
  auto visit = [&](size_t i) {
    if (seen[i]) return;
    seen[i] = true;
    s.order.push_back(i);
    queue.push_back(i);
  };
  if (exe < objects.size()) visit(exe);
  for (const std::string& name : preload.names) {
    if (auto i = match_object(objects, name)) visit(*i);
    else s.missing_preload.push_back(name);
  }
  // Breadth-first over DT_NEEDED, starting from the executable and the
  // preloads in that order (rtld's _dl_map_object_deps).
  while (!queue.empty()) {
    size_t i = queue.front();
    queue.pop_front();
    if (!objects[i].elf) continue;
    for (const std::string& needed : objects[i].elf->needed()) {
      if (auto j = match_object(objects, needed)) visit(*j);
      else if (std::find(s.missing_needed.begin(), s.missing_needed.end(), needed) ==
               s.missing_needed.end())
        s.missing_needed.push_back(needed);
    }
  }
  // Not in the global scope (dlopen'd, or a name we could not match): last.
  for (size_t i = 0; i < objects.size(); ++i)
    if (!seen[i]) s.order.push_back(i);
  return s;
}

AllocatorPlan plan_allocator_probes(const std::vector<LoadedObject>& objects, size_t exe,
                                    const PreloadList& preload,
                                    const std::vector<ProbeRole>& roles) {
  AllocatorPlan plan;
  if (exe >= objects.size() || !objects[exe].elf) {
    plan.support = Support::kUnsupported;
    plan.reason = "the executable could not be read";
    return plan;
  }
  const ElfFile& exe_elf = *objects[exe].elf;
  plan.go = exe_elf.is_go();
  // No PT_INTERP: nothing else is loaded by a loader (static, static-pie).
  plan.static_exe = !exe_elf.has_interp();
  if (plan.static_exe) {
    plan.search.order = {exe};
  } else {
    plan.search = global_search_order(objects, exe, preload);
  }

  auto excluded = [&](size_t i, const ProbeRole& role) {
    return role.skip_go_objects && objects[i].elf && objects[i].elf->is_go();
  };
  // Where a lookup may look: exported definitions in a dynamic process, any
  // definition in a static executable (its .symtab is all there is).
  auto lookup = [&](size_t i, const std::string& name, bool exported_only) {
    const ElfFile& e = *objects[i].elf;
    return exported_only && !plan.static_exe ? e.find_exported_function(name)
                                             : e.find_function(name);
  };

  std::vector<PlannedProbe> planned;
  auto add = [&](size_t object, const ProbeRole& role, const ProbeSpec& spec, ElfSymbol sym) {
    // One probe per address per object: aliases (tc_malloc = malloc,
    // mi_free = free = operator delete) are probed once, by the first row.
    for (PlannedProbe& p : planned) {
      if (p.object == object && p.symbol.vaddr == sym.vaddr) {
        if (p.spec.symbol != spec.symbol &&
            std::find(p.aliases.begin(), p.aliases.end(), spec.symbol) == p.aliases.end())
          p.aliases.push_back(spec.symbol);
        return;
      }
    }
    planned.push_back({object, role.name, spec, std::move(sym), {}});
  };

  std::vector<std::string> missing_required;
  for (const ProbeRole& role : roles) {
    for (const ProbeSpec& spec : role.probes) {
      if (role.scope == RoleScope::kInterposed) {
        // The first definition in search order wins, whatever its provider
        // class; the row applies only if the winner is of its class.
        std::optional<size_t> winner;
        std::optional<ElfSymbol> sym;
        for (size_t i : plan.search.order) {
          if (!objects[i].elf) continue;
          if ((sym = lookup(i, spec.symbol, true))) {
            winner = i;
            break;
          }
        }
        if (!winner || excluded(*winner, role)) {
          if (spec.required) missing_required.push_back(spec.symbol);
          continue;
        }
        if (provider_matches(spec.provider, objects[*winner]))
          add(*winner, role, spec, *sym);
        if (spec.symbol == "malloc") plan.allocator = winner;
      } else {
        for (size_t i : plan.search.order) {
          if (!objects[i].elf || excluded(i, role) || !provider_matches(spec.provider, objects[i]))
            continue;
          if (auto sym = lookup(i, spec.symbol, false)) add(i, role, spec, *sym);
        }
      }
    }
  }

  if (plan.allocator) {
    const ElfFile& a = *objects[*plan.allocator].elf;
    plan.family = allocator_family([&](const char* n) { return a.find_function(n).has_value(); });
  }
  if (plan.family.empty()) plan.family = "unknown";

  if (!missing_required.empty()) {
    if (!plan.static_exe && !plan.search.missing_needed.empty()) {
      // Caught right after exec: the loader has not mapped the libraries
      // yet. Their mapping is reported (LW_EV_MAP_EXEC) and resolved then.
      plan.support = Support::kPending;
      plan.reason = "waiting for the dynamic loader to map " + plan.search.missing_needed[0];
      return plan;
    }
    plan.support = Support::kUnsupported;
    if (plan.go)
      plan.reason = "Go program without cgo: Go's own heap is not traced";
    else if (plan.static_exe && exe_elf.function_count() == 0)
      plan.reason = "statically linked and stripped: no allocator symbols to probe";
    else if (plan.static_exe)
      plan.reason = "statically linked without " + missing_required[0];
    else
      plan.reason = "no object exports " + missing_required[0];
    return plan;
  }
  plan.probes = std::move(planned);
  if (plan.go) {
    plan.support = Support::kPartial;
    plan.reason = "Go program: only C allocations (cgo, libc) are traced, not Go's heap";
  } else {
    plan.support = Support::kFull;
  }
  return plan;
}

}  // namespace lw
