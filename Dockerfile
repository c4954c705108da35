# Multi-stage build: a static grpo binary on a distroless base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/grpo ./cmd/grpo

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/grpo /usr/local/bin/grpo
WORKDIR /home/nonroot
USER nonroot
ENTRYPOINT ["/usr/local/bin/grpo"]
CMD ["--help"]
