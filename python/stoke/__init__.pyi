"""Type stubs for stoke (the Rust extension stoke._stoke)."""

import os
from typing import Any, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Tuple, Union

DLPACK_VERSION: Tuple[int, int]
JPEG_SIMD: bool
"""The CPU decoder (libjpeg-turbo) was built with its SIMD code; False after a build without nasm (decoding about 1.5x slower)."""
NO_SIMD_ADVICE: str
CUDA_LIBRARIES: Dict[str, str]
"""libnvjpeg / libnvrtc found in pip's nvidia-* wheels on sys.path (keys "nvjpeg", "nvrtc")."""

class SampleError(RuntimeError):
    """A sample could not be read or decoded under on_error='fail'; the message names it."""

class Tensor:
    """A zero-copy view of a batch's images or labels (DLPack)."""

    @property
    def shape(self) -> List[int]: ...
    @property
    def dtype(self) -> Literal["float32", "float16", "bfloat16", "int64"]: ...
    @property
    def device(self) -> str: ...
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    @property
    def group(self) -> Optional["Tensor"]:
        """For one view of a ``views`` batch: its whole group ``[count * N, ...]`` (the group's
        views one after another in one buffer, no copy); None otherwise."""

class Loader:
    """Batches of augmented images (float32/float16/bfloat16) and int64 labels.

    Every option of `stoke bench`/`stoke dump` is here under its Python name. ``rank`` and
    ``world_size`` default to torchrun's RANK and WORLD_SIZE.

    With ``mixup``/``cutmix`` (timm's ``Mixup`` options and meaning), each
    batch is ``(images, targets)`` with float32 soft targets ``[N, num_classes]`` in place of
    the labels, as timm's ``Mixup`` returns them (use a soft-target cross-entropy).

    With ``stream=True`` (tar shards, local or in a store) only per-shard facts are indexed,
    each epoch is ordered by shards (a keyed shard order, samples mixed inside groups of
    ``stream_group`` shards, default 4) and whole shards are read ahead, at most
    ``read_ahead_bytes`` of them held at once (default 1 GiB; a shard the next batch needs is
    read even past it). Exact epochs, equal rank lengths and ``state_dict`` resume hold as
    without it, and ``state_dict`` resumes at another world size too. Both backends decode: the
    CUDA backend sizes its buffers from each shard's largest sample (in the shards'
    ``stoke-shards.json`` from ``stoke pack``, or read from the shards). Over a store,
    ``cache_dir`` and ``cache_limit`` (bytes) keep the shards read in a node-local folder: one
    download per shard per node, shared by the node's processes (lock files, atomic renames),
    kept across restarts, least recently used shards evicted to stay within the limit.

    ``resolution`` is FFCV's progressive resizing: ``{"min_res": 160, "max_res": 192,
    "start_ramp": 11, "end_ramp": 13}`` (or the tuple ``(160, 192, 11, 13)``) makes every batch
    of epoch ``e`` ``min_res`` square up to ``start_ramp``, ``max_res`` from ``end_ramp``, and
    between them the linear ramp rounded to a multiple of 32 (ffcv-imagenet's
    ``get_resolution``). Sizes are multiples of 32; ``size`` is then not given (it is
    ``max_res``, which memory is sized for); not with ``views`` or the eval preset. A resumed
    epoch (``load_state_dict``) has its epoch's size. ``crop_ratio`` (eval preset, in (0, 1],
    default 224/256) is the centre crop's share of the resized shorter side: the shorter side
    is resized to ``floor(size / crop_ratio)``.

    ``source`` may be Hugging Face Parquet files: one ``.parquet``, a folder of them (or a
    repository folder whose ``data/`` holds them), a split by file prefix (``data/train-``), or
    their ``s3://``/``gs://`` URL. The image column is the ``Image`` feature of the files'
    ``huggingface`` metadata (else ``image``), the label the ``ClassLabel`` (else ``label``);
    ``image_column``/``label_column`` name others. With ``stream=True`` each row group is a
    shard; without, a sample is read from its row group, decoded into a cache of at most 1 GiB.

    ``views`` (a list of groups, e.g. ``[{"count": 2, "size": 224, "scale": (0.4, 1.0)},
    {"count": 8, "size": 96, "scale": (0.05, 0.4)}]``, each with any of the augment keywords
    above and ``per_view``: one dict of them per view) makes several views of every sample from
    its one decode: iterating yields ``(views, labels)``, ``views`` a list with one Tensor per
    view in group order; ``views[i].group`` is its group's views as one tensor. The presets
    ``dino``, ``dinov2``, ``simclr`` set views of their own (``mae`` is one view);
    docs/semantics.md, "Views".

    ``transcode_progressive=True`` rewrites progressive JPEGs as baseline
    JPEGs holding the same DCT coefficients, once, and keeps them in RAM (at most
    ``transcode_cache_bytes``, default 1 GiB; past it they are rewritten again at each read):
    the CUDA backend's hardware engine then decodes them instead of nvJPEG's CUDA decoders,
    whose Huffman decoding runs on the host, and libjpeg-turbo decodes them 1.5-2x faster,
    to the same pixels. Not with ``stream=True``. ``stats()`` has ``transcoded_*`` counts.

    ``epoch_ahead`` (on by default): once an epoch's last batch is made, the next epoch's first
    batches are made too (up to ``prefetch``), so the epoch after starts as any batch does; an
    ``iter()`` of another epoch than the next (``set_epoch``, ``load_state_dict``) drops them.
    """

    def __init__(
        self,
        source: Union[str, os.PathLike],
        batch_size: int,
        *,
        device: str = "auto",
        preset: Literal["train", "eval", "deit", "dino", "dinov2", "simclr", "mae"] = "train",
        size: Optional[int] = None,
        resolution: Optional[Union[Mapping[str, int], Tuple[int, int, int, int]]] = None,
        crop_ratio: Optional[float] = None,
        dtype: Literal["float32", "float16", "bfloat16", "uint8"] = "float32",
        layout: Literal["nchw", "nhwc"] = "nchw",
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        on_error: Literal["skip", "fail"] = "skip",
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        threads: Optional[int] = None,
        reader_threads: Optional[int] = None,
        store_in_flight: Optional[int] = None,
        image_column: Optional[str] = None,
        label_column: Optional[str] = None,
        prefetch: Optional[int] = None,
        epoch_ahead: bool = True,
        decoders: Literal["all", "hw", "cuda"] = "all",
        gpu_upsampling: Literal["smooth", "nearest"] = "nearest",
        gpu_wait: Literal["auto", "block"] = "auto",
        gpu_bitstream: Literal["host", "device"] = "host",
        gpu_engine_gray: bool = False,
        gpu_engine_lanes: int = 1,
        gpu_engine_ahead: bool = False,
        transcode_progressive: bool = False,
        transcode_cache_bytes: Optional[int] = None,
        gpu_hybrid_share: Union[Literal["off", "auto"], float] = "off",
        decode_only: bool = False,
        gpu_memory_budget: Optional[int] = None,
        exif: bool = True,
        dct_scaling: bool = False,
        filter: Optional[Literal["bilinear", "bicubic"]] = None,
        antialias: Optional[bool] = None,
        hflip: Optional[float] = None,
        vflip: Optional[float] = None,
        rotate: Optional[Tuple[float, float]] = None,
        rotate_interp: Optional[Literal["nearest", "bilinear"]] = None,
        fill: Optional[Sequence[float]] = None,
        scale: Optional[Tuple[float, float]] = None,
        ratio: Optional[Tuple[float, float]] = None,
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        class_balanced: bool = False,
        class_weights: Optional[Sequence[float]] = None,
        epoch_length: Optional[int] = None,
        mixup: Optional[float] = None,
        cutmix: Optional[float] = None,
        cutmix_minmax: Optional[Tuple[float, float]] = None,
        mixup_prob: Optional[float] = None,
        mixup_switch_prob: Optional[float] = None,
        mixup_mode: Optional[Literal["batch", "pair", "elem"]] = None,
        smoothing: Optional[float] = None,
        num_classes: Optional[int] = None,
        aa: Optional[str] = None,
        color_jitter: Optional[Union[float, Sequence[float]]] = None,
        color_jitter_prob: Optional[float] = None,
        grayscale_prob: Optional[float] = None,
        reprob: Optional[float] = None,
        remode: Optional[Literal["const", "rand", "pixel"]] = None,
        recount: Optional[int] = None,
        train_interpolation: Optional[Literal["bilinear", "bicubic", "random"]] = None,
        affine_degrees: Optional[Union[float, Sequence[float]]] = None,
        affine_translate: Optional[Tuple[float, float]] = None,
        affine_scale: Optional[Tuple[float, float]] = None,
        affine_shear: Optional[Union[float, Sequence[float]]] = None,
        blur_prob: Optional[float] = None,
        blur_sigma: Optional[Tuple[float, float]] = None,
        blur_kernel: Optional[int] = None,
        solarize_prob: Optional[float] = None,
        solarize_threshold: Optional[float] = None,
        views: Optional[Sequence[Dict[str, Any]]] = None,
        max_held_batches: int = 8,
        config: Optional[Union[str, os.PathLike]] = None,
        stream: bool = False,
        stream_group: Optional[int] = None,
        read_ahead_bytes: Optional[int] = None,
        cache_dir: Optional[Union[str, os.PathLike]] = None,
        cache_limit: Optional[int] = None,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Tuple[Union[Tensor, List[Tensor]], Tensor]]:
        """Start an epoch (the one given to set_epoch or a loaded state, else the next)."""
    def set_epoch(self, epoch: int) -> None: ...
    def state_dict(self) -> Dict[str, Any]:
        """Where the loader is, JSON-serialisable and the same on every rank: the epoch, the
        order it belongs to (seed, shuffle, sampling, stream group, a fingerprint of the data
        set's keys) and the positions of the epoch no rank has delivered (``remaining``,
        ``next_pad``). Save one rank's with the checkpoint."""
    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue the saved epoch at this loader's rank, world size and batch size (any of
        them may differ from the run that saved it): the next ``iter()`` delivers this rank's
        share of the positions left, so that across the two runs every sample of the epoch is
        delivered exactly once (plus ``DistributedSampler``-style padding of at most
        ``world_size - 1`` per run). At the same world size the batches are the uninterrupted
        run's, bit for bit. A state of another seed, shuffle, sampling, stream group or data set
        raises ``ValueError`` naming it; a version 1 state (``epoch``/``step``) is converted."""
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def errors(self) -> List[Dict[str, Any]]: ...
    @property
    def held_batches(self) -> int: ...
    @property
    def backend(self) -> Literal["cpu", "cuda"]: ...
    def stats(self) -> Dict[str, float]: ...
