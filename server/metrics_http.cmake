# The HTTP endpoints. Included from server/CMakeLists.txt; kept out of the main
# server library so that only replicad_http compiles Boost.Beast.
find_package(OpenSSL REQUIRED)
add_library(replicad_http ${CMAKE_CURRENT_LIST_DIR}/http/http_server.cc
            ${CMAKE_CURRENT_LIST_DIR}/tls_files.cc)
target_link_libraries(replicad_http
                      PUBLIC absl::status absl::statusor absl::any_invocable
                      PRIVATE replicad_base absl::strings absl::synchronization Boost::headers
                              Threads::Threads
                              OpenSSL::SSL)
add_library(replicad_metrics_http ${CMAKE_CURRENT_LIST_DIR}/metrics_http_server.cc)
target_link_libraries(replicad_metrics_http PUBLIC replicad_http replicad_metrics)
