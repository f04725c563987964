// `glimpse certs`: a CA and one certificate per role for a deployment's mutual TLS
// (core/common/grpc/certificates.h, identity.h; docs/security.md).
#pragma once

namespace glimpse::cli {

int CertsCommand(int argc, char** argv);

}  // namespace glimpse::cli
