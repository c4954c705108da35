# Multi-stage build: a static grpo binary on a distroless base (~13 MB).
#   docker build -t grpo . && docker run --rm grpo version
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/grpo ./cmd/grpo \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/grpo /usr/local/bin/grpo
# /data belongs to the nonroot user, so a volume mounted there (the store,
# adapters, job records) starts out writable.
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
USER nonroot
ENTRYPOINT ["/usr/local/bin/grpo"]
CMD ["--help"]
