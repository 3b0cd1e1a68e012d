# The /metrics HTTP endpoint. Included from server/CMakeLists.txt; kept out of
# the main server library so that only this target compiles Boost.Beast.
add_library(replicad_metrics_http ${CMAKE_CURRENT_LIST_DIR}/metrics_http_server.cc)
target_link_libraries(replicad_metrics_http
                      PUBLIC replicad_metrics absl::status absl::statusor
                      PRIVATE absl::strings Boost::headers Threads::Threads)
