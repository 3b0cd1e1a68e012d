// The HTTP door's route table (server/http/route_table.h): first match in order wins, HEAD is
// GET, captures are percent-decoded segments, and a path that only other methods take
// reports them for a 405's Allow header.
#include "server/http/route_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

RouteTable<int> Routes() {
  RouteTable<int> routes;
  routes.Add("GET", "/v2/models/stats", 1);
  routes.Add("GET", "/v2/models/{model}", 2);
  routes.Add("POST", "/v2/models/{model}/infer", 3);
  routes.Add("GET", "/v2/models/{model}/versions/{version}", 4);
  routes.Add("DELETE", "/v2/models/{model}/infer", 5);
  return routes;
}

TEST(RouteTableTest, TheFirstMatchingRouteWinsAndCapturesDecodedSegments) {
  RouteTable<int> routes = Routes();
  auto found = routes.Find("GET", PathSegments("/v2/models/stats"));
  ASSERT_NE(found.payload, nullptr);
  EXPECT_EQ(*found.payload, 1);
  found = routes.Find("HEAD", PathSegments("//v2/models/a%2Fb/"));
  ASSERT_NE(found.payload, nullptr);
  EXPECT_EQ(*found.payload, 2);
  EXPECT_THAT(found.params, ElementsAre(Pair("model", "a/b")));
  found = routes.Find("GET", PathSegments("/v2/models/m/versions/7"));
  ASSERT_NE(found.payload, nullptr);
  EXPECT_EQ(*found.payload, 4);
  EXPECT_THAT(found.params, ElementsAre(Pair("model", "m"), Pair("version", "7")));
}

TEST(RouteTableTest, APathOtherMethodsTakeListsThemAndAnUnknownPathNone) {
  RouteTable<int> routes = Routes();
  auto found = routes.Find("GET", PathSegments("/v2/models/m/infer"));
  EXPECT_EQ(found.payload, nullptr);
  EXPECT_EQ(found.allowed, "POST, DELETE");
  found = routes.Find("GET", PathSegments("/v2/models/m/generate"));
  EXPECT_EQ(found.payload, nullptr);
  EXPECT_EQ(found.allowed, "");
  found = routes.Find("GET", PathSegments("/v2/models"));
  EXPECT_EQ(found.payload, nullptr);
  EXPECT_EQ(found.allowed, "");
}

TEST(RouteTableTest, PercentEscapesDecodeOnlyWhenWhole) {
  EXPECT_THAT(PathSegments("/a%20b/%2/%zz/%41"), ElementsAre("a b", "%2", "%zz", "A"));
}

}  // namespace
}  // namespace replicad
