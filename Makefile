# wcache — see README.md. Targets are the project's contract with CI (.ci/run).
GO        ?= go
BIN       ?= $(CURDIR)/bin
PROTOC    ?= protoc
PROTO_SRC := $(shell find proto -name '*.proto' | sort)
FUZZTIME  ?= 20s

.PHONY: all build proto proto-check test vet fmt-check demo bench fuzz lint clean

all: build

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/wcache ./cmd/wcache
	CGO_ENABLED=0 $(GO) build -o $(BIN)/wcache-backend-mock ./plugins/mock

proto:
	$(PROTOC) -I proto \
	  --plugin=protoc-gen-go=$(CURDIR)/scripts/protoc-gen-go \
	  --plugin=protoc-gen-go-grpc=$(CURDIR)/scripts/protoc-gen-go-grpc \
	  --go_out=proto --go_opt=paths=source_relative \
	  --go-grpc_out=proto --go-grpc_opt=paths=source_relative \
	  $(PROTO_SRC)

clean:
	rm -rf $(BIN)
