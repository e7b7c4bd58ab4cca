package sdk

// APIVersion is the backend plugin API version: the go-plugin handshake's
// ProtocolVersion (see HandshakeConfig), announced by every backend built
// with this sdk and required by the host. A host refuses a plugin that
// answers with a different version, so it changes only with an incompatible
// change of the Backend interface or its gRPC service.
const APIVersion = 1
