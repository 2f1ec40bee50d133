# The lease plane as a container: a static binary (make static: no cgo,
# SQLite is pure Go) on a distroless base, running as an unprivileged user
# (65532), with its state in the /data volume.
#
#   docker build -t leaseplane --build-arg VERSION=$(git describe --tags --always) .
#   docker run -p 8080:8080 -v leaseplane-data:/data leaseplane
#
# The first start prints the workspace key (docker logs). Base images could
# not be pulled where this file was written, so this build is documented,
# not tested; make test-static builds the same binary the same way and runs
# it as user 65532 with LEASEPLANE_ADDR and LEASEPLANE_DATA.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make static VERSION=${VERSION} && mkdir -p /data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/leaseplane-static /leaseplane
COPY --from=build --chown=65532:65532 /data /data
ENV LEASEPLANE_ADDR=0.0.0.0:8080 LEASEPLANE_DATA=/data
VOLUME /data
EXPOSE 8080
USER 65532:65532
ENTRYPOINT ["/leaseplane"]
CMD ["serve"]
