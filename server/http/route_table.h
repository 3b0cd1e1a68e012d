#ifndef REPLICAD_SERVER_HTTP_ROUTE_TABLE_H_
#define REPLICAD_SERVER_HTTP_ROUTE_TABLE_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace replicad {

// A path's segments, split at '/' (empty ones dropped) and percent-decoded
// ("%2F" and the like: clients quote model names).
std::vector<std::string> PathSegments(absl::string_view path);

// What a pattern's {name} segments captured, by name.
using PathParams = std::map<std::string, std::string, std::less<>>;

// Whether `path` matches `pattern` segment by segment: a "{name}" segment
// takes any one segment into params[name], any other must equal it.
bool MatchPath(const std::vector<std::string>& pattern, const std::vector<std::string>& path,
               PathParams* params);

// An HTTP door's routes, {method, path pattern, payload}, in the order
// added: the first whose pattern and method match wins, so literal routes go
// before captures that would take the same path ("/v2/models/stats" before
// "/v2/models/{model}"). HEAD is answered as GET. Not thread-safe to Add;
// Find is const and may run on any number of threads once built.
template <typename Payload>
class RouteTable {
 public:
  void Add(std::string method, absl::string_view pattern, Payload payload) {
    routes_.push_back(Route{std::move(method), PathSegments(pattern), std::move(payload)});
  }

  struct Found {
    const Payload* payload = nullptr;  // Null: no route (see allowed).
    PathParams params;
    // With no payload: the methods the path takes ("GET", "POST", "GET, POST")
    // for a 405 and its Allow header; empty when no route has the path (404).
    std::string allowed;
  };
  Found Find(absl::string_view method, const std::vector<std::string>& path) const {
    const absl::string_view wanted = method == "HEAD" ? absl::string_view("GET") : method;
    Found found;
    for (const Route& route : routes_) {
      PathParams params;
      if (!MatchPath(route.pattern, path, &params)) continue;
      if (route.method == wanted) {
        found.payload = &route.payload;
        found.params = std::move(params);
        return found;
      }
      if (found.allowed.find(route.method) == std::string::npos) {
        found.allowed += (found.allowed.empty() ? "" : ", ") + route.method;
      }
    }
    return found;
  }

 private:
  struct Route {
    std::string method;
    std::vector<std::string> pattern;
    Payload payload;
  };
  std::vector<Route> routes_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_HTTP_ROUTE_TABLE_H_
