#include "core/serve/model_manager.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/client_text.h"
#include "core/base/status_macros.h"
#include "core/base/worker_pool.h"

namespace replicad {

const char* ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kUnavailable:
      return "UNAVAILABLE";
  }
  return "UNAVAILABLE";
}

ModelManager::ModelManager(std::unique_ptr<ModelRepository> repository, Retirer& retirer,
                           int load_threads)
    : repository_(std::move(repository)),
      retirer_(retirer),
      load_threads_(std::max(load_threads, 1)) {}

ModelManager::~ModelManager() {
  absl::MutexLock lock(&mu_);
  for (auto& [name, entry] : models_) RetireAll(entry.versions);
}

void ModelManager::RetireAll(std::map<int64_t, std::shared_ptr<LoadedModel>>& versions) {
  for (auto& [version, loaded] : versions) retirer_.Retire(std::move(loaded));
  versions.clear();
}

absl::Status ModelManager::Load(const std::string& name) { return LoadEach({name}); }

absl::Status ModelManager::LoadEach(const std::vector<std::string>& names) {
  absl::MutexLock load_lock(&load_mu_);
  std::map<std::string, std::string> fingerprints;
  absl::StatusOr<std::vector<ModelRepository::Entry>> listed = repository_->List();
  if (listed.ok()) {
    for (const ModelRepository::Entry& e : *listed) fingerprints[e.name] = e.fingerprint;
  }
  std::vector<ModelRepository::Entry> entries;
  for (const std::string& name : names) entries.push_back({name, fingerprints[name]});
  return LoadEntries(entries);
}

absl::Status ModelManager::LoadEntries(const std::vector<ModelRepository::Entry>& entries) {
  {
    absl::MutexLock lock(&mu_);
    for (const ModelRepository::Entry& e : entries) models_[e.name].loading = true;
  }
  std::vector<absl::Status> statuses(entries.size());
  {
    // Loads are mostly single-threaded (parsing, optimising, laying out
    // weights) between their warm-ups: side by side they take the machine.
    WorkerPool pool(static_cast<int>(std::min<size_t>(load_threads_, entries.size())));
    for (size_t i = 0; i < entries.size(); ++i) {
      pool.Submit([this, &entries, &statuses, i] {
        statuses[i] = LoadOne(entries[i].name, entries[i].fingerprint);
      });
    }
  }  // Joins the pool.
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ModelManager::LoadOne(const std::string& name, const std::string& fingerprint) {
  absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> loaded = repository_->Load(name);
  absl::MutexLock lock(&mu_);
  ModelEntry& entry = models_[name];
  entry.loading = false;
  entry.fingerprint = fingerprint;
  if (!loaded.ok()) {
    entry.reason = std::string(loaded.status().message());
    if (entry.versions.empty() && loaded.status().code() == absl::StatusCode::kNotFound) {
      models_.erase(name);
    }
    return loaded.status();
  }
  if (loaded->empty()) {
    entry.reason = "the repository has no version of it to serve";
    RetireAll(entry.versions);
    return absl::NotFoundError(absl::StrCat("model '", name, "': ", entry.reason));
  }
  std::map<int64_t, std::shared_ptr<LoadedModel>> versions;
  for (std::shared_ptr<LoadedModel>& version : *loaded) {
    const int64_t number = version->version;
    versions[number] = std::move(version);
  }
  RetireAll(entry.versions);
  entry.versions = std::move(versions);
  entry.reason.clear();
  return absl::OkStatus();
}

absl::Status ModelManager::Unload(const std::string& name) {
  absl::MutexLock load_lock(&load_mu_);
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end() || it->second.versions.empty()) {
    return absl::NotFoundError(
        absl::StrCat("model '", name, "' is not loaded; loaded models: ", ServedNamesLocked()));
  }
  RetireAll(it->second.versions);
  it->second.reason = "unloaded";
  return absl::OkStatus();
}

absl::Status ModelManager::LoadAll() {
  absl::MutexLock load_lock(&load_mu_);
  absl::StatusOr<std::vector<ModelRepository::Entry>> listed = repository_->List();
  if (!listed.ok()) return listed.status();
  return LoadEntries(*listed);
}

absl::Status ModelManager::Poll() {
  absl::MutexLock load_lock(&load_mu_);
  REPLICAD_ASSIGN_OR_RETURN(std::vector<ModelRepository::Entry> listed, repository_->List());
  std::set<std::string> present;
  std::vector<ModelRepository::Entry> changed;
  {
    absl::MutexLock lock(&mu_);
    for (const ModelRepository::Entry& e : listed) {
      present.insert(e.name);
      auto it = models_.find(e.name);
      // A model whose load failed is tried again only once its files change.
      if (it == models_.end() || it->second.fingerprint != e.fingerprint) changed.push_back(e);
    }
    for (auto it = models_.begin(); it != models_.end();) {
      if (present.count(it->first) == 0) {
        RetireAll(it->second.versions);
        it = models_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return LoadEntries(changed);
}

absl::StatusOr<std::shared_ptr<LoadedModel>> ModelManager::Find(const std::string& name,
                                                                int64_t version) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it != models_.end() && it->second.versions.empty() && it->second.loading) {
    return absl::UnavailableError(
        absl::StrCat("'", ClientText(name), "' is loading and not ready yet"));
  }
  if (it == models_.end() || it->second.versions.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "'", ClientText(name), "' is not served; served models: ", ServedNamesLocked()));
  }
  const auto& versions = it->second.versions;
  if (version == 0) return versions.rbegin()->second;
  auto v = versions.find(version);
  if (v == versions.end()) {
    return absl::NotFoundError(absl::StrCat(
        "'", ClientText(name), "' has no version ", version,
        "; ready versions: ", absl::StrJoin(versions, ", ", [](std::string* out, const auto& e) {
          absl::StrAppend(out, e.first);
        })));
  }
  return v->second;
}

std::vector<std::shared_ptr<LoadedModel>> ModelManager::Ready() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<LoadedModel>> ready;
  for (const auto& [name, entry] : models_) {
    for (const auto& [version, loaded] : entry.versions) ready.push_back(loaded);
  }
  return ready;
}

std::vector<ModelIndexEntry> ModelManager::Index() const {
  absl::StatusOr<std::vector<ModelRepository::Entry>> listed = repository_->List();
  absl::MutexLock lock(&mu_);
  std::map<std::string, bool> names;
  if (listed.ok()) {
    for (const ModelRepository::Entry& e : *listed) names[e.name] = true;
  }
  for (const auto& [name, entry] : models_) names[name] = true;
  std::vector<ModelIndexEntry> index;
  for (const auto& [name, unused] : names) {
    auto it = models_.find(name);
    if (it == models_.end()) {
      index.push_back(ModelIndexEntry{name, 0, ModelState::kUnavailable, "not loaded"});
      continue;
    }
    const ModelEntry& entry = it->second;
    if (entry.loading) {
      index.push_back(ModelIndexEntry{name, 0, ModelState::kLoading, ""});
    }
    for (const auto& [version, loaded] : entry.versions) {
      index.push_back(ModelIndexEntry{name, version, ModelState::kReady, ""});
    }
    if (!entry.loading && entry.versions.empty()) {
      index.push_back(ModelIndexEntry{name, 0, ModelState::kUnavailable, entry.reason});
    }
  }
  return index;
}

std::string ModelManager::ServedNamesLocked() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : models_) {
    if (!entry.versions.empty()) names.push_back(name);
  }
  return names.empty() ? "(none)" : absl::StrJoin(names, ", ");
}

}  // namespace replicad
