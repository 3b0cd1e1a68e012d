"""The replicad.v1 protocol: messages (replicad_pb2) and the gRPC stub (replicad_pb2_grpc),
generated from proto/replicad/v1/replicad.proto by generate_stubs.sh."""
